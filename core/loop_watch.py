"""The event-loop lag monitor: a heartbeat on the loop feeds the lag histogram; a watchdog thread names each stall."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Coroutine
from typing import Any

from core import metrics
from core.observe import RunInfo

log = logging.getLogger(__name__)

# How often the heartbeat runs; the watchdog looks twice as often, so a stall is seen within a beat of its threshold.
HEARTBEAT_INTERVAL_S = 0.05
WATCHDOG_POLL_S = 0.025
# A stall longer than this (past the beat's due time) is logged once, with the loop thread's stack.
STALL_WARNING_S = 0.25
STACK_FRAMES = 40
THREAD_JOIN_S = 2.0


class LoopWatch:
    """Started inside the running loop (`relaybot run`) and stopped before it closes.

    Attribution costs nothing per token or per task step: the loop publishes only when its heartbeat is
    next due (one float, written once a beat). A Task factory remembers each task's Context (on 3.11 a
    Task's context is not readable), one weak-map entry per task. Only when a stall is seen does the
    watchdog look for the task whose coroutine is running (`cr_running`, readable from any thread) and
    read the run id from its Context — no sys.setprofile, no debug mode, no per-callback hook.
    """

    def __init__(self, *, stall_warning_s: float = STALL_WARNING_S, interval_s: float = HEARTBEAT_INTERVAL_S) -> None:
        self._stall_warning_s = stall_warning_s
        self._interval_s = interval_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id = 0
        self._contexts: weakref.WeakKeyDictionary[asyncio.Task[Any], contextvars.Context] = weakref.WeakKeyDictionary()
        self._previous_factory: Any = None
        self._beat: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # Written by the loop, read by the watchdog: a float assignment is atomic under the GIL.
        self._due = 0.0
        # The generation of the garbage collection running now (-1: none), and the longest seen since the last
        # report, so a stall that is the collector says so instead of blaming whatever frame it interrupted.
        self._collecting = -1
        self._collected_s = 0.0
        self._collect_started = 0.0
        self.stalls_reported = 0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._loop_thread_id = threading.get_ident()
        self._previous_factory = loop.get_task_factory()
        loop.set_task_factory(self._task_factory)
        self._due = time.monotonic() + self._interval_s
        self._beat = loop.create_task(self._heartbeat(), name="loop-watch-heartbeat")
        self._stopping.clear()
        gc.callbacks.append(self._on_collection)
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stopping.set()
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        if self._beat is not None:
            self._beat.cancel()
            try:
                await self._beat
            except asyncio.CancelledError:
                pass
        if self._thread is not None:
            # Joined off the loop: the watchdog may be asleep for a poll.
            await asyncio.to_thread(self._thread.join, THREAD_JOIN_S)
        if self._loop is not None and self._loop.get_task_factory() == self._task_factory:
            self._loop.set_task_factory(self._previous_factory)
        self._beat = self._thread = None

    def _task_factory(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
    ) -> asyncio.Task[Any]:
        context = kwargs.pop("context", None) or contextvars.copy_context()
        if self._previous_factory is not None:
            task = self._previous_factory(loop, coro, context=context, **kwargs)
        else:
            task = asyncio.Task(coro, loop=loop, context=context, **kwargs)
        self._contexts[task] = context
        return task

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self._loop_thread_id:
            return  # a collection in another thread does not hold the loop
        if phase == "start":
            self._collecting, self._collect_started = int(info.get("generation", -1)), time.monotonic()
        else:
            self._collected_s = max(self._collected_s, time.monotonic() - self._collect_started)
            self._collecting = -1

    async def _heartbeat(self) -> None:
        while True:
            self._due = time.monotonic() + self._interval_s
            await asyncio.sleep(self._interval_s)
            metrics.record_loop_lag(time.monotonic() - self._due)

    def _watch(self) -> None:
        reported_due = 0.0
        while not self._stopping.wait(WATCHDOG_POLL_S):
            due = self._due
            if due != reported_due and time.monotonic() - due > self._stall_warning_s:
                reported_due = due
                try:
                    self._report(time.monotonic() - due)
                except Exception:
                    log.exception("the loop watchdog could not describe a stall")

    def _report(self, late_s: float) -> None:
        frame = sys._current_frames().get(self._loop_thread_id)
        stack = "".join(traceback.format_stack(frame, limit=STACK_FRAMES)) if frame is not None else "(no stack)\n"
        task, run = self._running()
        self.stalls_reported += 1
        collecting, collected_s, self._collected_s = self._collecting, self._collected_s, 0.0
        if collecting >= 0:
            cause = f"; a garbage collection of generation {collecting} is running"
        elif collected_s * 1000 >= 1:
            cause = f"; garbage collection took {collected_s * 1000:.0f} ms of it"
        else:
            cause = ""
        log.warning(
            "event loop stalled for %.0f ms so far in task %s (run %s)%s; the loop thread's stack:\n%s",
            late_s * 1000, task.get_name() if task is not None else "(unknown)",
            run.run_id if run is not None else "(none)", cause, stack.rstrip(),
        )

    def _running(self) -> tuple[asyncio.Task[Any] | None, RunInfo | None]:
        """The task whose coroutine runs now, and the run its context is bound to (None, None: not a task)."""
        for _ in range(3):
            try:
                tasks = list(self._contexts.items())
                break
            except RuntimeError:  # the loop thread changed the map mid-copy
                continue
        else:
            return None, None
        for task, context in tasks:
            if getattr(task.get_coro(), "cr_running", False):
                runs = [value for value in context.values() if isinstance(value, RunInfo)]
                return task, runs[0] if runs else None
        # A task from before the watch started (the main one): named if asyncio says, its run unknown.
        try:
            return asyncio.current_task(self._loop), None
        except Exception:  # reading another thread's loop is CPython's dict today, not a promise
            return None, None
