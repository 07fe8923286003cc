"""Runs in progress and the stop requests written on them, in Postgres, so a Stop click reaches any process."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core.requests import ConversationKey
from core.store.db import Database

# Postgres NOTIFY channel a stop request is announced on (the payload is the run id).
STOP_CHANNEL = "relaybot_run_stop"
# A run's row is kept this long after it ended (or was last seen, if its process died): a Stop click on
# it says "already finished" meanwhile, and "not running" after.
RUN_STOP_RETENTION_DAYS = 7
# A run not seen for this long died with its process (its process says so every 10 s while it runs).
DEAD_AFTER_S = 60.0


@dataclass(frozen=True, kw_only=True)
class RunRow:
    """One run as stored: where, who asked, whether it ended, and who asked it to stop."""

    run_id: str
    conversation: ConversationKey
    asked_by: str
    seen_at: datetime
    ended_at: datetime | None
    outcome: str | None
    stop_by_id: str | None
    stop_by: str | None
    # Not seen for the dead-after time, by the database's clock (a process's own clock may be minutes off).
    dead: bool = False


@dataclass(frozen=True, kw_only=True)
class StopRequest:
    run_id: str
    by_id: str
    by: str


class RunStopStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def started(self, run_id: str, conversation: ConversationKey, *, asked_by: str) -> None:
        """A run begins (a resumed run takes its turn's row again, with no stop request on it)."""
        async with self._db.connection() as conn:
            await conn.execute(
                "INSERT INTO run_stops (run_id, platform, workspace, channel, thread, asked_by)"
                " VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (run_id) DO UPDATE SET started_at = now(), seen_at = now(), ended_at = NULL,"
                " outcome = NULL, stop_by_id = NULL, stop_by = NULL, stop_at = NULL",
                (uuid.UUID(run_id), conversation.platform, conversation.workspace, conversation.channel,
                 conversation.thread, asked_by),
            )

    async def ended(self, run_id: str, outcome: str) -> None:
        async with self._db.connection() as conn:
            await conn.execute(
                "UPDATE run_stops SET ended_at = now(), outcome = %s WHERE run_id = %s", (outcome, uuid.UUID(run_id))
            )

    async def prune(self, *, older_than_days: float = RUN_STOP_RETENTION_DAYS) -> int:
        """Forget runs that ended (or were last seen) longer ago than the retention; returns how many."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM run_stops WHERE coalesce(ended_at, seen_at) < now() - make_interval(secs => %s)",
                (older_than_days * 86400.0,),
            )
            return cursor.rowcount

    async def get(self, run_id: str, *, dead_after_s: float = DEAD_AFTER_S) -> RunRow | None:
        """The run's row; `dead` when it was last seen longer than `dead_after_s` ago, by the database's clock."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT run_id, platform, workspace, channel, thread, asked_by, seen_at, ended_at, outcome,"
                " stop_by_id, stop_by, seen_at < now() - make_interval(secs => %s) FROM run_stops WHERE run_id = %s",
                (dead_after_s, uuid.UUID(run_id)),
            )
            row = await cursor.fetchone()
        if row is None:
            return None
        return RunRow(
            run_id=str(row[0]), conversation=ConversationKey(platform=row[1], workspace=row[2], channel=row[3], thread=row[4]),
            asked_by=row[5], seen_at=row[6], ended_at=row[7], outcome=row[8], stop_by_id=row[9], stop_by=row[10],
            dead=bool(row[11]),
        )

    async def request_stop(self, run_id: str, *, by_id: str, by: str) -> bool:
        """Writes the stop request on a run still going, and announces it; False if it had ended or was
        already asked to stop. Announced in the same transaction, so a listener reads the row it hears of."""
        async with self._db.connection() as conn:
            async with conn.transaction():
                cursor = await conn.execute(
                    "UPDATE run_stops SET stop_by_id = %s, stop_by = %s, stop_at = now()"
                    " WHERE run_id = %s AND ended_at IS NULL AND stop_at IS NULL"
                    " AND seen_at >= now() - make_interval(secs => %s) RETURNING run_id",
                    (by_id, by, uuid.UUID(run_id), DEAD_AFTER_S),
                )
                taken = await cursor.fetchone() is not None
                if taken:
                    await conn.execute("SELECT pg_notify(%s, %s)", (STOP_CHANNEL, run_id))
        return taken

    async def stop_requests(self, run_ids: Sequence[str]) -> list[StopRequest]:
        """The stop requests written on these runs (the poll behind LISTEN, for a notification missed)."""
        if not run_ids:
            return []
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT run_id, stop_by_id, stop_by FROM run_stops"
                " WHERE run_id = ANY(%s) AND ended_at IS NULL AND stop_at IS NOT NULL",
                ([uuid.UUID(r) for r in run_ids],),
            )
            rows = await cursor.fetchall()
        return [StopRequest(run_id=str(r[0]), by_id=r[1] or "", by=r[2] or "") for r in rows]

    async def seen(self, run_ids: Sequence[str]) -> None:
        """These runs are alive in this process (a run not seen for a while died with its process)."""
        if not run_ids:
            return
        async with self._db.connection() as conn:
            await conn.execute(
                "UPDATE run_stops SET seen_at = now() WHERE run_id = ANY(%s) AND ended_at IS NULL",
                ([uuid.UUID(r) for r in run_ids],),
            )
