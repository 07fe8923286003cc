"""One ordered feed of live channel changes to the engine: a queue and one worker, off the answer path, bounded."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from core.learning.model import ChannelChange
from core.learning.ports import ChannelLearning

log = logging.getLogger(__name__)

# Changes waiting for the engine: past this many, new ones are dropped (and logged); the catch-up's re-scan
# after a restart is what finds them again.
FEED_MAX = 10_000


# A change, or the changes of an event that needs a platform call first (a Discord thread not in discord.py's cache,
# a Slack message's author's name): made in the worker, in its turn.
Pending = ChannelChange | Callable[[], Awaitable[Sequence[ChannelChange]]]


class LearningFeed:
    """One queue and one worker task: changes reach `take` in the order the platform sent them (an edit never before
    its message, a delete never before what it deletes), and a failing one is logged and the next taken."""

    def __init__(self, learning: Callable[[], ChannelLearning | None], *, platform: str, max_queued: int = FEED_MAX) -> None:
        self._learning = learning
        self._platform = platform
        self._queue: asyncio.Queue[Pending] = asyncio.Queue(max_queued)
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self.dropped = 0
        self.pending = 0  # changes put and not yet taken (or failed)

    def put(self, change: Pending) -> None:
        if self._closed or self._learning() is None:
            return
        try:
            self._queue.put_nowait(change)
            self.pending += 1
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("learning from %s is %d changes behind: one is dropped (the next catch-up re-reads it)",
                        self._platform, self._queue.qsize())
            return
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name=f"{self._platform}-learning-feed")

    async def drained(self) -> None:
        """Every change put so far has been taken (tests, and a graceful close)."""
        await self._queue.join()

    async def _work(self) -> None:
        while True:
            pending = await self._queue.get()
            try:
                changes = (pending,) if isinstance(pending, ChannelChange) else await pending()
                for change in changes:
                    await self._take(change)
            except Exception:
                log.exception("learning could not follow a %s event", self._platform)
            finally:
                self.pending -= 1
                self._queue.task_done()

    async def _take(self, change: ChannelChange) -> None:
        try:
            learning = self._learning()
            if learning is not None:
                await learning.take(change)
        except Exception:
            log.exception("learning could not take a %s of %s", change.kind, change.place.key)

    async def close(self) -> None:
        """Changes still queued are dropped: the next start's catch-up re-reads what they were about."""
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None
