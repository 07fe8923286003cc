"""Paused runs: save, record decisions per call, claim exactly once, finish, expire, revert."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from core.store.db import Database
from core.text_safety import is_storable, storable, storable_json

ContinuationStatus = Literal["pending", "resuming", "done", "expired", "failed"]

COLUMNS = (
    "id, conversation_id, status, schema_version, state, call_ids, decisions, started_calls, requested_by,"
    " message_refs, claimed_by, claimed_at, created_at, expires_at, finished_at, platform, calls"
)


@dataclass(frozen=True, kw_only=True)
class Decision:
    """One human decision on one pending call."""

    approved: bool
    actor: str
    comment: str = ""
    result: str | None = None  # a client-executed tool's result, sent by the client (approved=True)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"approved": self.approved, "actor": self.actor, "comment": self.comment}
        if self.result is not None:
            data["result"] = self.result
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Decision":
        result = data.get("result")
        return cls(approved=bool(data["approved"]), actor=str(data.get("actor", "")), comment=str(data.get("comment", "")),
                   result=str(result) if result is not None else None)


@dataclass(frozen=True, kw_only=True)
class StoredCall:
    """A pending call as an approval shows it; `arguments` is the model's raw JSON, keys in its order."""

    call_id: str
    tool: str
    arguments: str
    description: str = ""
    client: bool = False  # a client-executed tool: answered with its result, not a decision

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"call_id": self.call_id, "tool": self.tool, "arguments": self.arguments,
                                "description": self.description}
        if self.client:
            data["client"] = True
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "StoredCall":
        return cls(
            call_id=str(data.get("call_id", "")), tool=str(data.get("tool", "")),
            arguments=str(data.get("arguments", "")), description=str(data.get("description", "")),
            client=bool(data.get("client", False)),
        )


@dataclass(frozen=True, kw_only=True)
class ContinuationRow:
    """A continuation as stored."""

    id: uuid.UUID
    conversation_id: int | None
    status: ContinuationStatus
    schema_version: int
    state: dict[str, Any]
    call_ids: tuple[str, ...]
    decisions: dict[str, Decision]
    started_calls: tuple[str, ...]
    requested_by: str
    message_refs: list[dict[str, Any]] = field(default_factory=list)
    claimed_by: str | None = None
    claimed_at: datetime | None = None
    created_at: datetime | None = None
    expires_at: datetime | None = None
    finished_at: datetime | None = None
    platform: str = ""
    calls: tuple[StoredCall, ...] = ()

    @property
    def undecided(self) -> tuple[str, ...]:
        return tuple(call_id for call_id in self.call_ids if call_id not in self.decisions)


def _jsonb(value: Any) -> Jsonb:
    """A JSON value as Postgres can store it: a decision's comment, a client tool's result and a paused run's state
    carry outside text (a NUL fails jsonb, a lone surrogate fails UTF-8)."""
    return Jsonb(storable_json(value))


def _row(data: dict[str, Any]) -> ContinuationRow:
    data = dict(data)
    data["call_ids"] = tuple(data["call_ids"])
    data["started_calls"] = tuple(data["started_calls"])
    data["decisions"] = {call_id: Decision.from_json(value) for call_id, value in data["decisions"].items()}
    data["calls"] = tuple(StoredCall.from_json(call) for call in data.get("calls") or ())
    return ContinuationRow(**data)


class ContinuationStore:
    """Every state change is one conditional statement, so concurrent clicks and instances agree."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def save(
        self,
        *,
        conversation_id: int | None,
        schema_version: int,
        state: dict[str, Any],
        calls: tuple[StoredCall, ...],
        requested_by: str,
        expires_at: datetime,
        platform: str,
    ) -> uuid.UUID:
        """Store a paused run (committed when this returns)."""
        continuation_id = uuid.uuid4()
        async with self._db.connection() as conn:
            await conn.execute(
                "INSERT INTO continuations (id, conversation_id, schema_version, state, call_ids, calls, requested_by,"
                " expires_at, platform) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    continuation_id, conversation_id, schema_version, _jsonb(state),
                    [storable(call.call_id) for call in calls], _jsonb([call.to_json() for call in calls]),
                    storable(requested_by), expires_at, platform,
                ),
            )
        return continuation_id

    async def get(self, continuation_id: uuid.UUID) -> ContinuationRow | None:
        return await self._fetch_one(f"SELECT {COLUMNS} FROM continuations WHERE id = %s", (continuation_id,))

    async def record_decision(
        self, continuation_id: uuid.UUID, *, call_id: str | None, decision: Decision,
        among: tuple[str, ...] | None = None,
    ) -> ContinuationRow | None:
        """Record a decision for one call, or for every undecided call when call_id is None (only those
        `among` the given ids, when given: an "approve all" covers only the calls its message showed).

        Returns the updated row, or None when nothing changed (not pending, expired, unknown call,
        that call already decided, or no call left undecided) — the caller reads the row to say which.
        """
        if (call_id is not None and not is_storable(call_id)) or (among is not None and not all(map(is_storable, among))):
            return None  # no stored call has such an id (and a NUL would fail the statement)
        if call_id is None and among is not None:
            return await self._fetch_one(
                "UPDATE continuations SET decisions ="
                " (SELECT coalesce(jsonb_object_agg(c, %s::jsonb), '{}'::jsonb) FROM unnest(call_ids) AS c"
                "  WHERE c = ANY(%s::text[])) || decisions"
                " WHERE id = %s AND status = 'pending' AND expires_at > now()"
                " AND EXISTS (SELECT 1 FROM unnest(call_ids) AS c WHERE c = ANY(%s::text[]) AND NOT decisions ? c)"
                f" RETURNING {COLUMNS}",
                (_jsonb(decision.to_json()), list(among), continuation_id, list(among)),
            )
        if call_id is None:
            return await self._fetch_one(
                "UPDATE continuations SET decisions ="
                " (SELECT coalesce(jsonb_object_agg(c, %s::jsonb), '{}'::jsonb) FROM unnest(call_ids) AS c)"
                " || decisions"
                " WHERE id = %s AND status = 'pending' AND expires_at > now()"
                f" AND EXISTS (SELECT 1 FROM unnest(call_ids) AS c WHERE NOT decisions ? c) RETURNING {COLUMNS}",
                (_jsonb(decision.to_json()), continuation_id),
            )
        return await self._fetch_one(
            "UPDATE continuations SET decisions = decisions || jsonb_build_object(%s::text, %s::jsonb)"
            " WHERE id = %s AND status = 'pending' AND expires_at > now()"
            f" AND %s = ANY(call_ids) AND NOT decisions ? %s RETURNING {COLUMNS}",
            (call_id, _jsonb(decision.to_json()), continuation_id, call_id, call_id),
        )

    async def claim(self, continuation_id: uuid.UUID, *, actor: str) -> ContinuationRow | None:
        """pending → resuming once every call is decided; exactly one caller gets the row."""
        return await self._fetch_one(
            "UPDATE continuations SET status = 'resuming', claimed_by = %s, claimed_at = now()"
            " WHERE id = %s AND status = 'pending' AND expires_at > now()"
            " AND (SELECT count(*) FROM jsonb_object_keys(decisions)) >= cardinality(call_ids)"
            f" RETURNING {COLUMNS}",
            (storable(actor), continuation_id),
        )

    async def mark_started(self, continuation_id: uuid.UUID, call_id: str) -> bool:
        """Note that a call is about to run; False if it already started (so it never runs twice)."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "UPDATE continuations SET started_calls = array_append(started_calls, %s)"
                " WHERE id = %s AND status = 'resuming' AND NOT (%s = ANY(started_calls)) RETURNING 1",
                (call_id, continuation_id, call_id),
            )
            return await cursor.fetchone() is not None

    async def finish(self, continuation_id: uuid.UUID, *, status: ContinuationStatus = "done") -> None:
        async with self._db.connection() as conn:
            await conn.execute(
                "UPDATE continuations SET status = %s, finished_at = now() WHERE id = %s AND status = 'resuming'",
                (status, continuation_id),
            )

    async def release(self, continuation_id: uuid.UUID, *, started_calls: int) -> bool:
        """resuming → pending when no call started since the claim (which saw `started_calls`); True if released."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "UPDATE continuations SET status = 'pending', claimed_by = NULL, claimed_at = NULL"
                " WHERE id = %s AND status = 'resuming' AND cardinality(started_calls) = %s RETURNING 1",
                (continuation_id, started_calls),
            )
            return await cursor.fetchone() is not None

    async def withdraw(self, continuation_id: uuid.UUID) -> bool:
        """Close a pending run nobody can decide (its approval message could not be shown)."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "UPDATE continuations SET status = 'failed', finished_at = now() WHERE id = %s AND status = 'pending'"
                " RETURNING 1",
                (continuation_id,),
            )
            return await cursor.fetchone() is not None

    async def expire_due(self, *, platforms: tuple[str, ...] | None = None) -> list[ContinuationRow]:
        """Close pending runs past their expiry (of the given platforms only); returns them so their messages can be edited."""
        return await self._fetch_all(
            "UPDATE continuations SET status = 'expired', finished_at = now()"
            " WHERE status = 'pending' AND expires_at <= now() AND (%s::text[] IS NULL OR platform = ANY(%s::text[]))"
            f" RETURNING {COLUMNS}",
            (list(platforms) if platforms is not None else None, list(platforms) if platforms is not None else None),
        )

    async def revert_stuck(self, *, older_than_s: float) -> list[ContinuationRow]:
        """Runs left in `resuming` by a crash go back to `pending`; started calls stay marked.

        A run whose conversation lease is still being renewed is alive, however long it takes,
        and is left alone (reverting it would let a click start a second pass).
        """
        return await self._fetch_all(
            "UPDATE continuations SET status = 'pending', claimed_by = NULL, claimed_at = NULL"
            " WHERE status = 'resuming' AND claimed_at < now() - make_interval(secs => %s)"
            " AND NOT EXISTS (SELECT 1 FROM conversation_leases l"
            "  WHERE l.conversation_id = continuations.conversation_id AND l.expires_at > now())"
            f" RETURNING {COLUMNS}",
            (older_than_s,),
        )

    async def pending(self, *, platform: str, limit: int, workspace: str | None = None) -> list[ContinuationRow]:
        """Open (pending, not yet expired) runs of one platform (of one workspace, when given: another team's many
        approvals never crowd a team's own out of the `limit`), newest first: what someone may still decide."""
        return await self._fetch_all(
            f"SELECT {COLUMNS} FROM continuations WHERE status = 'pending' AND platform = %s"
            " AND (%s::text IS NULL OR state -> 'conversation' ->> 'workspace' = %s::text)"
            " AND (expires_at IS NULL OR expires_at > now()) ORDER BY created_at DESC LIMIT %s",
            (platform, workspace, workspace, limit),
        )

    async def add_message_ref(self, continuation_id: uuid.UUID, ref: dict[str, Any]) -> None:
        """Remember a platform message showing this approval, to edit it later (e.g. on expiry)."""
        async with self._db.connection() as conn:
            await conn.execute(
                "UPDATE continuations SET message_refs = message_refs || %s::jsonb WHERE id = %s",
                (_jsonb([ref]), continuation_id),
            )

    async def _fetch_one(self, query: str, params: tuple[Any, ...]) -> ContinuationRow | None:
        rows = await self._fetch_all(query, params)
        return rows[0] if rows else None

    async def _fetch_all(self, query: str, params: tuple[Any, ...]) -> list[ContinuationRow]:
        async with self._db.connection() as conn:
            async with conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(query, params)
                rows = await cursor.fetchall() if cursor.description else []
        return [_row(row) for row in rows]
