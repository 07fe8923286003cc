"""Platform event ids already taken: one atomic "first time?" per event, across instances, a burst's in one statement."""

from __future__ import annotations

from collections import OrderedDict

import psycopg

from core.store.db import Database
from core.store.group_commit import GroupCommit

PROCESSED_EVENT_RETENTION_DAYS = 7
# Ids written for an asker that stopped waiting (its platform's ack deadline), kept for its redelivery.
ORPHANS_MAX = 10_000

Key = tuple[str, str]


class ProcessedEvents:
    """Deduplicates platform events in Postgres, on the database's intake lane (core.store.lanes).

    Every asker's id joins the next statement (core.store.group_commit): a lone event is written at once; a burst
    of a hundred in one or two statements instead of a hundred commits, which is what held the last of a burst past
    Slack's ack and its first sign."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._writes: GroupCommit[Key, bool] = GroupCommit(self._insert, unheard=self._orphaned)
        # Written as new while nobody waited any more (the asker gave up and did not ack): the event is ours,
        # and its redelivery to this process is told "first time", or it would be taken and never answered.
        self._orphans: OrderedDict[Key, None] = OrderedDict()

    async def first_time(self, platform: str, event_id: str) -> bool:
        """True for exactly one caller per (platform, event id), whichever process asks."""
        key = (platform, event_id)
        if key in self._orphans:
            del self._orphans[key]
            return True
        return await self._writes.ask(key)

    def _orphaned(self, key: Key, new: bool) -> None:
        if new:
            self._orphans[key] = None
            while len(self._orphans) > ORPHANS_MAX:
                self._orphans.popitem(last=False)

    async def _insert(self, keys: list[Key]) -> list[bool]:
        async def insert(conn: psycopg.AsyncConnection) -> list[tuple[object, ...]]:
            cursor = await conn.execute(
                "INSERT INTO processed_events (platform, event_id) SELECT * FROM unnest(%s::text[], %s::text[]) "
                "ON CONFLICT DO NOTHING RETURNING platform, event_id",
                ([platform for platform, _ in keys], [event_id for _, event_id in keys]),
            )
            return await cursor.fetchall()

        rows = await self._db.intake.run(insert)
        new = {(str(platform), str(event_id)) for platform, event_id in rows}
        # One id asked twice in a batch (a retry beside the first delivery) is new for the first asker only.
        results = []
        for key in keys:
            results.append(key in new)
            new.discard(key)
        return results

    async def prune(self, *, older_than_days: int = PROCESSED_EVENT_RETENTION_DAYS) -> int:
        """Forget event ids older than the retention; returns how many were removed."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM processed_events WHERE received_at < now() - make_interval(days => %s)",
                (older_than_days,),
            )
            return cursor.rowcount
