"""Final answer texts not yet delivered, kept until this or another process delivers them (the outbox)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg.types.json import Jsonb

from core.ports import FinalPart, PendingFinal
from core.store.db import Database
from core.store.heartbeats import STALE_AFTER_S, process_identity

_FIELDS = "answer_id, platform, workspace, channel, thread, parts"
# A final handed back after a failure waits 2^attempts seconds before it is taken again, at most this.
RETRY_CAP_S = 300.0
_STAMP = (
    "INSERT INTO process_heartbeats (owner, seen_at) VALUES (%s, now())"
    " ON CONFLICT (owner) DO UPDATE SET seen_at = now()"
)


class PendingFinals:
    """Implements core.ports.FinalOutbox for the process `owner`."""

    def __init__(self, db: Database, *, owner: str | None = None, stale_after_s: float = STALE_AFTER_S) -> None:
        self._db = db
        self.owner = owner or process_identity()
        self._stale_after_s = stale_after_s

    async def keep(self, final: PendingFinal, *, attempted: Mapping[int, float] | None = None) -> None:
        """Stores the final (or its new parts, while this process owns it) with the posts of parts already sent
        unseen (`attempted`: epoch seconds by part) in the same statement, so no crash keeps a part without its
        attempt (the next process would post it beside the message the platform may have made)."""
        async with self._db.connection() as conn:
            await conn.execute(_STAMP, (self.owner,))
            await conn.execute(
                f"INSERT INTO pending_finals ({_FIELDS}, owner, attempted) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (answer_id) DO UPDATE SET parts = EXCLUDED.parts,"
                " attempted = pending_finals.attempted || EXCLUDED.attempted, updated_at = now()"
                # Only its owner updates a final: one taken over (this process looked dead) stays the taker's.
                " WHERE pending_finals.owner = EXCLUDED.owner",
                (final.answer_id, final.platform, final.workspace, final.channel, final.thread,
                 Jsonb(_parts_json(final.parts)), self.owner,
                 Jsonb({str(index): float(at) for index, at in (attempted or {}).items()})),
            )

    async def delivered(self, answer_id: str) -> None:
        """The final is done with: its row goes, and in the same transaction every live record of its answer (a post's
        intent its dead process left, say), which crash repair would otherwise take once the row is gone and end the
        delivered message with the interrupted note."""
        async with self._db.connection() as conn:
            await conn.execute("DELETE FROM pending_finals WHERE answer_id = %s", (answer_id,))
            await conn.execute("DELETE FROM live_messages WHERE answer_id = %s", (answer_id,))

    async def release(self, answer_id: str, *, backoff: bool = False) -> None:
        """Hand the final over; with `backoff` (it failed), nobody takes it for 2^attempts s (capped at 5 minutes)."""
        async with self._db.connection() as conn:
            await conn.execute(
                "UPDATE pending_finals SET owner = '', attempts = attempts + 1, updated_at = now(),"
                " not_before = now() + make_interval(secs => CASE WHEN %s THEN LEAST(%s, power(2, attempts)) ELSE 0 END)"
                " WHERE answer_id = %s",
                (backoff, RETRY_CAP_S, answer_id),
            )

    async def attempting(self, answer_id: str, index: int, *, at: float | None = None) -> bool:
        """Before a post of part `index`: records that it was attempted (at `at`, epoch seconds; default the
        database's now), only while this process still owns the final. False: it was handed over (released, or
        taken by another process as this one's heartbeat went stale), so this process must not post it."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "UPDATE pending_finals SET attempted = attempted || jsonb_build_object(%s::text,"
                " COALESCE(%s::float8, extract(epoch FROM now())::float8)) WHERE answer_id = %s AND owner = %s",
                (str(index), at, answer_id, self.owner),
            )
            return cursor.rowcount > 0

    async def attempts(self, answer_id: str) -> dict[int, float]:
        """When a post of each part was attempted without its outcome seen (epoch seconds), by part."""
        async with self._db.connection() as conn:
            cursor = await conn.execute("SELECT attempted FROM pending_finals WHERE answer_id = %s", (answer_id,))
            row = await cursor.fetchone()
        return {int(part): float(at) for part, at in (row[0] if row else {}).items()}

    async def expire(self, platform: str, *, max_age_s: float) -> list[PendingFinal]:
        """Removes and returns the platform's finals kept longer than `max_age_s`: the only way one is given up."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM pending_finals WHERE answer_id IN (SELECT answer_id FROM pending_finals"
                " WHERE platform = %s AND created_at < now() - make_interval(secs => %s) FOR UPDATE SKIP LOCKED)"
                f" RETURNING {_FIELDS}",
                (platform, max_age_s),
            )
            return [_final(row) for row in await cursor.fetchall()]

    async def take(self, platform: str, *, limit: int | None = None) -> list[PendingFinal]:
        async with self._db.connection() as conn:
            # The taker is alive by definition: its claims must not look orphaned to the next taker.
            await conn.execute(_STAMP, (self.owner,))
            cursor = await conn.execute(
                "UPDATE pending_finals SET owner = %s, updated_at = now() WHERE answer_id IN ("
                " SELECT f.answer_id FROM pending_finals f LEFT JOIN process_heartbeats h ON h.owner = f.owner"
                " WHERE f.platform = %s AND f.not_before <= now() AND (f.owner = '' OR (f.owner <> %s"
                "  AND (h.owner IS NULL OR h.seen_at < now() - make_interval(secs => %s))))"
                " ORDER BY f.created_at LIMIT %s FOR UPDATE OF f SKIP LOCKED)"
                f" RETURNING {_FIELDS}",
                (self.owner, platform, self.owner, self._stale_after_s, limit),
            )
            rows = await cursor.fetchall()
        return [_final(row) for row in rows]


def _final(row: Any) -> PendingFinal:
    return PendingFinal(
        answer_id=row[0], platform=row[1], workspace=row[2], channel=row[3], thread=row[4],
        parts=tuple(FinalPart(text=str(p.get("text", "")), message_id=p.get("message_id")) for p in row[5]),
    )


def _parts_json(parts: tuple[FinalPart, ...]) -> list[dict[str, Any]]:
    return [{"text": part.text, "message_id": part.message_id} for part in parts]
