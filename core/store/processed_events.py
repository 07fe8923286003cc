"""Platform event ids already taken: one atomic "first time?" per event, across instances."""

from __future__ import annotations

from core.store.db import Database

PROCESSED_EVENT_RETENTION_DAYS = 7


class ProcessedEvents:
    """Deduplicates platform events in Postgres."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def first_time(self, platform: str, event_id: str) -> bool:
        """True for exactly one caller per (platform, event id), whichever process asks."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "INSERT INTO processed_events (platform, event_id) VALUES (%s, %s) "
                "ON CONFLICT DO NOTHING RETURNING 1",
                (platform, event_id),
            )
            return await cursor.fetchone() is not None

    async def prune(self, *, older_than_days: int = PROCESSED_EVENT_RETENTION_DAYS) -> int:
        """Forget event ids older than the retention; returns how many were removed."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM processed_events WHERE received_at < now() - make_interval(days => %s)",
                (older_than_days,),
            )
            return cursor.rowcount
