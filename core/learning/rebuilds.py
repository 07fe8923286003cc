"""Documents rebuilt after their messages change: a burst coalesced (one rebuild per interval), a few at a time."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# A document rebuilt at most this often while changes keep coming: the first change builds at once, so the lag
# from an event to its document searchable is at most this plus one build.
REBUILD_INTERVAL_S = 0.5
# Documents built at once: each holds a pooled connection for its read and write, and the embedder for its chunks.
REBUILDS_AT_ONCE = 4

Rebuild = Callable[[int, str], Awaitable[None]]
DocumentId = tuple[int, str]  # (source id, document key)


@dataclass(kw_only=True)
class _Pending:
    dirty: bool = True
    urgent: bool = False
    last_started: float = float("-inf")
    task: asyncio.Task[None] | None = None
    # Resolved when the next build to start (one that sees every change asked for so far) ends.
    next_done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Rebuilds:
    """One worker per document with changes: it builds, and builds again while changes came in meanwhile."""

    def __init__(self, rebuild: Rebuild, *, interval_s: float = REBUILD_INTERVAL_S, at_once: int = REBUILDS_AT_ONCE):
        self._rebuild = rebuild
        self.interval_s = interval_s
        self._slots = asyncio.Semaphore(at_once)
        self._pending: dict[DocumentId, _Pending] = {}
        self._recent: dict[DocumentId, float] = {}  # when documents with no change waiting were last built
        self.builds = 0

    def want(self, source_id: int, keys: Iterable[str], *, urgent: bool = False) -> list[asyncio.Future[None]]:
        """Rebuild these documents soon (`urgent`: without waiting out the interval); returns, per document, what
        resolves once a build that saw this change ended."""
        done = []
        for key in keys:
            document = (source_id, key)
            pending = self._pending.get(document)
            if pending is None:
                pending = self._pending[document] = _Pending(last_started=self._recent.pop(document, float("-inf")))
            pending.dirty = True
            pending.urgent = pending.urgent or urgent
            if pending.task is None:
                pending.task = asyncio.create_task(self._work(document, pending), name=f"rebuild-{source_id}-{key}")
            done.append(pending.next_done)
        return done

    async def now(self, source_id: int, keys: Iterable[str]) -> None:
        """Rebuild these documents at once and return when each is built as its messages stand now."""
        waits = self.want(source_id, keys, urgent=True)
        if waits:
            await asyncio.gather(*(asyncio.shield(w) for w in waits))

    async def settled(self) -> None:
        """Return once no document waits for a rebuild."""
        while self._pending:
            tasks = [p.task for p in self._pending.values() if p.task is not None]
            if tasks:
                await asyncio.wait(tasks)
            else:
                await asyncio.sleep(0)

    async def close(self) -> None:
        tasks = [p.task for p in self._pending.values() if p.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pending.clear()

    def _remember(self, document: DocumentId, started: float) -> None:
        self._recent[document] = started
        if len(self._recent) > 1024:
            horizon = time.monotonic() - self.interval_s
            self._recent = {d: at for d, at in self._recent.items() if at > horizon}

    async def _work(self, document: DocumentId, pending: _Pending) -> None:
        try:
            while pending.dirty:
                wait = pending.last_started + self.interval_s - time.monotonic()
                if wait > 0 and not pending.urgent:
                    await asyncio.sleep(wait)
                pending.dirty = pending.urgent = False
                this_build, pending.next_done = pending.next_done, asyncio.get_running_loop().create_future()
                pending.last_started = time.monotonic()
                async with self._slots:
                    try:
                        await self._rebuild(*document)
                    except Exception:  # noqa: BLE001 — the document stays as it was; its next change rebuilds it
                        log.exception("rebuilding document %s of source %s failed", document[1], document[0])
                self.builds += 1
                if not this_build.done():
                    this_build.set_result(None)
        finally:
            if self._pending.get(document) is pending:
                del self._pending[document]
                self._remember(document, pending.last_started)
            if not pending.next_done.done():
                pending.next_done.set_result(None)
