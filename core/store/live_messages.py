"""Answer messages still streaming, recorded with the process that streams them, so that a crash never
leaves one at "thinking…" and a second process never touches a live one."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from core import observe
from core.ports import LiveMessage
from core.store.db import Database
from core.store.group_commit import GroupCommit, last_per_key
from core.store.heartbeats import STALE_AFTER_S, process_identity

_FIELDS = "platform, workspace, channel, message_id, thread"


@dataclass(frozen=True, kw_only=True)
class TakenMessage(LiveMessage):
    """An orphan as `take_all` claims it, with the answer it belongs to ('' when unknown), so that repair finishes
    an answer's messages together: the interrupted note on its last message, not in the middle of its text."""

    answer_id: str = ""


@dataclass(frozen=True, kw_only=True)
class _Write:
    """An add (`answer_id` set, '' when unknown) or a remove (None) of one message's record."""

    message: LiveMessage
    answer_id: str | None


class LiveMessages:
    """Implements core.ports.LiveAnswerLog for the process `owner`."""

    def __init__(self, db: Database, *, owner: str | None = None, stale_after_s: float = STALE_AFTER_S) -> None:
        self._db = db
        self.owner = owner or process_identity()
        self._stale_after_s = stale_after_s
        # A burst of answers' records (each post's intent, then its message) in a statement, not a commit each
        # queued on the heartbeat row every add also writes.
        self._writes: GroupCommit[_Write, None] = GroupCommit(self._write)

    async def add(self, message: LiveMessage, *, answer_id: str | None = None) -> None:
        """Records `message` as streaming, with the answer it belongs to (default: the run being played, whose id
        is the answer's), so that repair leaves it to the outbox once that answer's final is kept."""
        if answer_id is None:
            run = observe.current_run()
            answer_id = run.run_id if run is not None else ""
        await self._writes.ask(_Write(message=message, answer_id=answer_id))

    async def remove(self, *, platform: str, channel: str, message_id: str) -> None:
        gone = LiveMessage(platform=platform, workspace="", channel=channel, message_id=message_id, thread="")
        await self._writes.ask(_Write(message=gone, answer_id=None))

    async def _write(self, writes: list[_Write]) -> list[None]:
        """A batch of adds and removes in one transaction; of several for one message, the last one counts."""
        latest = last_per_key(writes, lambda write: (write.message.platform, write.message.channel,
                                                     write.message.message_id))
        added = [write for write in latest if write.answer_id is not None]
        removed = [write.message for write in latest if write.answer_id is None]
        async def write(conn: psycopg.AsyncConnection) -> None:
            if removed:
                await conn.execute(
                    "DELETE FROM live_messages WHERE (platform, channel, message_id) IN"
                    " (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]))",
                    ([m.platform for m in removed], [m.channel for m in removed], [m.message_id for m in removed]),
                )
            if added:
                await conn.execute(
                    f"INSERT INTO live_messages ({_FIELDS}, owner, answer_id)"
                    " SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],"
                    " %s::text[]) ON CONFLICT DO NOTHING",
                    tuple(list(column) for column in zip(*(
                        (w.message.platform, w.message.workspace, w.message.channel, w.message.message_id,
                         w.message.thread, self.owner, w.answer_id) for w in added))),
                )
                # Writing is a sign of life too, so a record is never an orphan the moment it is made.
                await conn.execute(
                    "INSERT INTO process_heartbeats (owner, seen_at) VALUES (%s, now())"
                    " ON CONFLICT (owner) DO UPDATE SET seen_at = now()",
                    (self.owner,),
                )

        await self._db.deliveries.run(write)
        return [None] * len(writes)

    async def release(self, message: LiveMessage) -> None:
        """A repair that failed for now (a 429, Slack down): the record is an orphan again, for the next round."""
        async with self._db.connection() as conn:
            await conn.execute(
                "UPDATE live_messages SET owner = '' WHERE platform = %s AND channel = %s AND message_id = %s AND owner = %s",
                (message.platform, message.channel, message.message_id, self.owner),
            )

    async def take_all(self, platform: str) -> list[LiveMessage]:
        """Claim and return the platform's orphans: records whose owner's heartbeat is stale or missing.

        Concurrent callers in several processes each get different rows (SKIP LOCKED), so every
        orphan is repaired exactly once; a live process's records are never taken. A claimed record stays
        (owned by this process) until its repair succeeded or failed for good (`remove`), or is handed
        back (`release`): a repair that meets a 429 is never forgotten. They come grouped by answer, each answer's
        in the order written.

        An orphan whose answer's final is kept in the outbox is dropped instead: the outbox finishes that message,
        and a repair's note written over it would stay (a delivery that finds the part already posted keeps it).
        """
        async with self._db.connection() as conn:
            await conn.execute(
                "INSERT INTO process_heartbeats (owner, seen_at) VALUES (%s, now())"
                " ON CONFLICT (owner) DO UPDATE SET seen_at = now()",
                (self.owner,),
            )
            await conn.execute(
                "DELETE FROM live_messages WHERE ctid IN ("
                " SELECT m.ctid FROM live_messages m LEFT JOIN process_heartbeats h ON h.owner = m.owner"
                " WHERE m.platform = %s AND m.owner <> %s AND m.answer_id <> ''"
                " AND EXISTS (SELECT 1 FROM pending_finals f WHERE f.answer_id = m.answer_id)"
                " AND (h.owner IS NULL OR h.seen_at < now() - make_interval(secs => %s))"
                " FOR UPDATE OF m SKIP LOCKED)",
                (platform, self.owner, self._stale_after_s),
            )
            cursor = await conn.execute(
                "UPDATE live_messages SET owner = %s WHERE ctid IN ("
                " SELECT m.ctid FROM live_messages m LEFT JOIN process_heartbeats h ON h.owner = m.owner"
                " WHERE m.platform = %s AND m.owner <> %s"
                " AND (h.owner IS NULL OR h.seen_at < now() - make_interval(secs => %s))"
                # Never one of a kept final, even if its owner went stale only after the delete above had looked.
                " AND NOT (m.answer_id <> '' AND EXISTS (SELECT 1 FROM pending_finals f WHERE f.answer_id = m.answer_id))"
                " FOR UPDATE OF m SKIP LOCKED)"
                f" RETURNING {_FIELDS}, answer_id, started_at",
                (self.owner, platform, self.owner, self._stale_after_s),
            )
            rows = await cursor.fetchall()
        # An answer's records together, in the order they were written (its parts' order: each is recorded as its
        # post is attempted or made, and a part is posted only after the one before it).
        rows.sort(key=lambda row: (row[5], row[6], row[3]))
        return [
            TakenMessage(platform=row[0], workspace=row[1], channel=row[2], message_id=row[3], thread=row[4],
                         answer_id=row[5])
            for row in rows
        ]
