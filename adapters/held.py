"""Questions held in memory while the database is down, where nothing redelivers them (the Discord gateway)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import psycopg

log = logging.getLogger(__name__)

# At most this many held per platform, taken again this often, told after this long (the database still down).
HELD_MAX = 100
HELD_RETRY_S = 2.0
HELD_GIVE_UP_S = 120.0


class EventNotRecorded(Exception):
    """The event's dedup record could not be written (the database is down): it is not taken yet."""


# What a handler's steps before the answer raise while the database is down or unreachable (PoolTimeout and a
# connection the server closed are OperationalErrors; a bug in a query is not held).
DATABASE_DOWN: tuple[type[Exception], ...] = (EventNotRecorded, psycopg.OperationalError)

Step = Callable[[], Awaitable[None]]


class HeldEvents:
    """One task per held event id: `take` again until it no longer raises DATABASE_DOWN, else `tell` the asker."""

    def __init__(self, *, platform: str) -> None:
        self.platform = platform
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping = asyncio.Event()

    def __len__(self) -> int:
        return len(self._tasks)

    def hold(self, event_id: str, *, take: Step, tell: Step) -> None:
        """Once per event id; a full queue tells the asker at once."""
        if event_id in self._tasks:
            return
        if self._stopping.is_set() or len(self._tasks) >= HELD_MAX:
            log.warning("%s event %s cannot be held (%d held, or stopping); telling the asker", self.platform, event_id,
                        len(self._tasks))
            self._tasks[event_id] = asyncio.create_task(self._run(event_id, None, tell))
            return
        log.warning("%s event %s could not be recorded (database down); holding it", self.platform, event_id)
        self._tasks[event_id] = asyncio.create_task(self._run(event_id, take, tell))

    async def _run(self, event_id: str, take: Step | None, tell: Step) -> None:
        started = time.monotonic()
        try:
            while take is not None and not self._stopping.is_set() and time.monotonic() - started < HELD_GIVE_UP_S:
                try:
                    await asyncio.wait_for(self._stopping.wait(), HELD_RETRY_S)
                    break
                except asyncio.TimeoutError:
                    pass
                try:
                    await take()
                except DATABASE_DOWN:
                    continue
                except Exception:
                    log.exception("%s event %s failed when taken again", self.platform, event_id)
                return
            if take is not None:
                log.warning("%s event %s held %.0f s without the database; telling the asker", self.platform, event_id,
                            time.monotonic() - started)
            await tell()
        finally:
            self._tasks.pop(event_id, None)

    async def release(self, timeout_s: float) -> list[asyncio.Task[None]]:
        """At close: every held event's asker is told (nothing else will answer it); the tasks still running after
        timeout_s, for the caller to cancel."""
        self._stopping.set()
        tasks = [task for task in self._tasks.values() if not task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        return [task for task in tasks if not task.done()]
