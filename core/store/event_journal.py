"""The API's SSE event journal in Postgres: events appended in batches, read back after an id, pruned when old."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from psycopg.types.json import Jsonb

from core.api_access import JournalEvent
from core.store.db import Database
from core.text_safety import storable_json


class EventJournal:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def append(self, stream_id: uuid.UUID, key_id: int, events: Sequence[JournalEvent]) -> None:
        """One write for a batch; an event written twice (a retried batch) is kept once. Every event's data is
        made storable here (NUL, lone surrogates), whichever event it is."""
        if not events:
            return
        async with self._db.connection() as conn:
            async with conn.cursor() as cursor:
                await cursor.executemany(
                    "INSERT INTO api_event_journal (stream_id, key_id, seq, event, data) VALUES (%s, %s, %s, %s, %s)"
                    " ON CONFLICT DO NOTHING",
                    [(stream_id, key_id, e.seq, e.event, Jsonb(storable_json(e.data))) for e in events],
                )

    async def after(self, stream_id: uuid.UUID, key_id: int, seq: int) -> list[JournalEvent]:
        """The stream's events numbered above `seq`, in order."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT seq, event, data FROM api_event_journal WHERE stream_id = %s AND key_id = %s AND seq > %s"
                " ORDER BY seq",
                (stream_id, key_id, seq),
            )
            return [JournalEvent(seq=row[0], event=row[1], data=row[2]) for row in await cursor.fetchall()]

    async def prune(self, *, older_than_s: float) -> int:
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM api_event_journal WHERE created_at < now() - make_interval(secs => %s)", (older_than_s,)
            )
            return cursor.rowcount
