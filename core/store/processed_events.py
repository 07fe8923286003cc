"""Platform event ids already taken: one atomic "first time?" per event, across instances, a burst's in one statement."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from core.store.db import Database

PROCESSED_EVENT_RETENTION_DAYS = 7
# Ids written in one statement at most (a burst of thousands goes in several).
BATCH_MAX = 500
# Ids written for an asker that stopped waiting (its platform's ack deadline), kept for its redelivery.
ORPHANS_MAX = 10_000
# A statement that has not answered by then is given up (its askers have long stopped waiting: the gate waits 2 s),
# so the ids that queued behind it get a statement of their own.
WRITE_TIMEOUT_S = 5.0

Key = tuple[str, str]


class ProcessedEvents:
    """Deduplicates platform events in Postgres, on the database's intake lane.

    Every asker's id joins the next statement: while one writes, the ids that arrive meanwhile wait for the next
    (a lone event is written at once; a burst of a hundred in one or two statements instead of a hundred commits,
    which is what held the last of a burst past Slack's ack and its first sign)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._next: dict[Key, list[asyncio.Future[bool]]] = {}
        self._writer: asyncio.Task[None] | None = None
        # Written as new while nobody waited any more (the asker gave up and did not ack): the event is ours,
        # and its redelivery to this process is told "first time", or it would be taken and never answered.
        self._orphans: OrderedDict[Key, None] = OrderedDict()

    async def first_time(self, platform: str, event_id: str) -> bool:
        """True for exactly one caller per (platform, event id), whichever process asks."""
        key = (platform, event_id)
        if key in self._orphans:
            del self._orphans[key]
            return True
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._next.setdefault(key, []).append(future)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_while_asked())
        return await future

    async def _write_while_asked(self) -> None:
        try:
            while self._next:
                keys = list(self._next)[:BATCH_MAX]
                batch = {key: self._next.pop(key) for key in keys}
                try:
                    new = await asyncio.wait_for(self._insert(keys), WRITE_TIMEOUT_S)
                except asyncio.CancelledError:
                    _cancel(batch)
                    raise
                except Exception as error:
                    _fail(batch, error)
                    continue
                self._answer(batch, new)
        finally:
            self._writer = None
            _cancel(self._next)  # only when cancelled itself: the loop above runs until nobody is waiting
            self._next = {}

    def _answer(self, batch: dict[Key, list[asyncio.Future[bool]]], new: set[Key]) -> None:
        for key, futures in batch.items():
            first = key in new
            for future in futures:
                if not future.done():
                    future.set_result(first)
                    first = False
            if first:
                self._orphans[key] = None
                while len(self._orphans) > ORPHANS_MAX:
                    self._orphans.popitem(last=False)

    async def _insert(self, keys: list[Key]) -> set[Key]:
        rows = await self._db.intake_fetch(
            "INSERT INTO processed_events (platform, event_id) SELECT * FROM unnest(%s::text[], %s::text[]) "
            "ON CONFLICT DO NOTHING RETURNING platform, event_id",
            ([platform for platform, _ in keys], [event_id for _, event_id in keys]),
        )
        return {(str(platform), str(event_id)) for platform, event_id in rows}

    async def prune(self, *, older_than_days: int = PROCESSED_EVENT_RETENTION_DAYS) -> int:
        """Forget event ids older than the retention; returns how many were removed."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM processed_events WHERE received_at < now() - make_interval(days => %s)",
                (older_than_days,),
            )
            return cursor.rowcount


def _fail(batch: dict[Key, list[asyncio.Future[bool]]], error: Exception) -> None:
    for futures in batch.values():
        for future in futures:
            if not future.done():
                future.set_exception(error)


def _cancel(batch: dict[Key, list[asyncio.Future[bool]]]) -> None:
    for futures in batch.values():
        for future in futures:
            future.cancel()
