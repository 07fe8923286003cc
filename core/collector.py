"""Full garbage collections when the process is quiet, not in the middle of a burst of answers.

A full collection walks every object the collector tracks, on the event loop: mid-burst that is every running and
waiting answer's state (~100k objects, 50-150 ms on this hardware, a stall every answer feels). Young-generation
collections go on as Python runs them; full ones run here, once no run is active (the heap is back to its small
self), or at the latest FULL_COLLECTION_MAX_INTERVAL_S after the last, so a process never quiet still collects.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# The longest a full collection waits for a quiet moment (real seconds): what cycles of garbage may hold meanwhile.
FULL_COLLECTION_MAX_INTERVAL_S = 300.0
QUIET_CHECK_S = 1.0
# Young-generation collections since the last full one before a quiet moment is worth one (Python's own threshold2).
YOUNG_COLLECTIONS_PER_FULL = 10
# Python's full-collection threshold while this runs: never reached, so only this module starts full collections.
_NEVER = 2**30


class QuietCollector:
    """Takes full collections away from Python's own schedule for the process's life (`start` … `stop`)."""

    def __init__(self, busy: Callable[[], bool], *, max_interval_s: float = FULL_COLLECTION_MAX_INTERVAL_S,
                 check_s: float = QUIET_CHECK_S) -> None:
        self._busy = busy
        self._max_interval_s = max_interval_s
        self._check_s = check_s
        self._thresholds: tuple[int, int, int] | None = None
        self._task: asyncio.Task[None] | None = None
        self._young_since_full = 0
        self._last_full = time.monotonic()
        self.full_collections = 0

    def start(self) -> None:
        self._thresholds = gc.get_threshold()
        gc.set_threshold(self._thresholds[0], self._thresholds[1], _NEVER)
        gc.callbacks.append(self._counted)
        self._last_full = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="quiet-collector")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._counted in gc.callbacks:
            gc.callbacks.remove(self._counted)
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None

    def _counted(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info.get("generation") == 1:
            self._young_since_full += 1

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._check_s)
            overdue = time.monotonic() - self._last_full >= self._max_interval_s
            worth_it = self._young_since_full >= YOUNG_COLLECTIONS_PER_FULL
            if overdue or (worth_it and not self._busy()):
                self._collect()

    def _collect(self) -> None:
        started = time.monotonic()
        found = gc.collect()
        self._young_since_full = 0
        self._last_full = time.monotonic()
        self.full_collections += 1
        log.debug("full collection: %d unreachable objects in %.0f ms", found, 1000 * (self._last_full - started))
