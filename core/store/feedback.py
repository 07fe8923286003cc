"""👍/👎 on answers in Postgres: one vote per person per turn (changeable), an optional comment, and the export rows."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.store.db import Database
from core.text_safety import storable


@dataclass(frozen=True, kw_only=True)
class FeedbackRow:
    """One vote as `relaybot feedback` exports it, beside the turn it is about."""

    turn_id: str
    platform: str
    user_id: str
    user_name: str
    vote: int  # 1 up, -1 down
    comment: str
    at: datetime
    question: str
    answer: str
    sources: list[dict[str, Any]]
    workspace: str = ""  # the team whose conversation the turn is in ('' where migration 027 found none)


class FeedbackStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def vote(
        self, turn_id: str, *, user_id: str, user_name: str, platform: str, up: bool, workspace: str | None = None
    ) -> bool:
        """Records (or changes) a person's vote on a turn; False for an id that names no turn (none of `workspace`'s,
        when the platform says where the click was: a team never votes on another's answer). A changed vote
        keeps the comment only while it stays 👎 (a comment says why it was down)."""
        async with self._db.connection() as conn:
            turn = await _stored_turn(conn, turn_id, platform=platform, workspace=workspace)
            if turn is None:
                return False
            key, where = turn
            await conn.execute(
                "INSERT INTO feedback (turn_id, user_id, user_name, platform, workspace, vote)"
                " VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (turn_id, user_id) DO UPDATE SET vote = EXCLUDED.vote, user_name = EXCLUDED.user_name,"
                " comment = CASE WHEN EXCLUDED.vote = feedback.vote THEN feedback.comment ELSE '' END,"
                " workspace = EXCLUDED.workspace, updated_at = now()",
                (key, storable(user_id), storable(user_name), platform, where, 1 if up else -1),
            )
        return True

    async def comment(
        self, turn_id: str, *, user_id: str, user_name: str, platform: str, text: str, workspace: str | None = None
    ) -> bool:
        """Why a 👎: stored on the person's vote (made 👎 if it was not); False for an id that names no turn (of
        `workspace`, when given)."""
        async with self._db.connection() as conn:
            turn = await _stored_turn(conn, turn_id, platform=platform, workspace=workspace)
            if turn is None:
                return False
            key, where = turn
            await conn.execute(
                "INSERT INTO feedback (turn_id, user_id, user_name, platform, workspace, vote, comment)"
                " VALUES (%s, %s, %s, %s, %s, -1, %s)"
                " ON CONFLICT (turn_id, user_id) DO UPDATE SET vote = -1, comment = EXCLUDED.comment,"
                " workspace = EXCLUDED.workspace, updated_at = now()",
                # The comment is a person's words from a modal: outside text, made storable as it is written.
                (key, storable(user_id), storable(user_name), platform, where, storable(text).strip()),
            )
        return True

    async def export(self, *, since: datetime | None = None, team: tuple[str, str] | None = None) -> list[FeedbackRow]:
        """Every vote (since a time, when given; of one team, (platform, workspace), when given), oldest first, with
        its turn's question, answer and sources."""
        platform, workspace = team if team is not None else (None, None)
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT f.turn_id, f.platform, f.workspace, f.user_id, f.user_name, f.vote, f.comment, f.updated_at,"
                " (SELECT m.content FROM messages m WHERE m.turn_id = f.turn_id AND m.role = 'user' ORDER BY m.id LIMIT 1),"
                " (SELECT m.content FROM messages m WHERE m.turn_id = f.turn_id AND m.role = 'assistant'"
                "   ORDER BY m.id DESC LIMIT 1),"
                " (SELECT m.sources FROM messages m WHERE m.turn_id = f.turn_id AND m.sources IS NOT NULL"
                "   ORDER BY m.id DESC LIMIT 1)"
                " FROM feedback f WHERE (%s::timestamptz IS NULL OR f.updated_at >= %s::timestamptz)"
                " AND (%s::text IS NULL OR (f.platform = %s::text AND f.workspace = %s::text))"
                " ORDER BY f.updated_at, f.turn_id, f.user_id",
                (since, since, platform, platform, workspace),
            )
            rows = await cursor.fetchall()
        return [
            FeedbackRow(
                turn_id=str(r[0]), platform=r[1], workspace=r[2], user_id=r[3], user_name=r[4], vote=int(r[5]),
                comment=r[6], at=r[7], question=r[8] or "", answer=r[9] or "", sources=list(r[10] or []),
            )
            for r in rows
        ]


async def _stored_turn(
    conn: Any, turn_id: str, *, platform: str, workspace: str | None
) -> tuple[uuid.UUID, str] | None:
    """The turn id as a UUID and its conversation's workspace when it names a stored turn of `platform` (and of
    `workspace`, when given), else None (votes only land on real answers, and on the voter's own team's)."""
    try:
        key = uuid.UUID(turn_id)
    except ValueError:
        return None
    cursor = await conn.execute(
        "SELECT c.platform, c.workspace FROM messages m JOIN conversations c ON c.id = m.conversation_id"
        " WHERE m.turn_id = %s LIMIT 1", (key,))  # every message of a turn is in its one conversation
    row = await cursor.fetchone()
    if row is None:
        return None
    if workspace is not None and (row[0], row[1]) != (platform, workspace):
        return None
    return key, row[1]
