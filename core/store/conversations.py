"""Conversations by platform key, and their stored messages grouped into turns."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Sequence

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from core.requests import ConversationKey
from core.store.db import Database
from core.text_safety import storable, storable_json


@dataclass(frozen=True, kw_only=True)
class StoredMessage:
    """One stored chat message; the rows of an exchange share a turn_id."""

    id: int
    turn_id: uuid.UUID
    role: str
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    sources: list[dict[str, Any]] | None = None
    author: str | None = None
    token_count: int | None = None
    token_encoding: str | None = None


@dataclass(frozen=True, kw_only=True)
class NewMessage:
    """A message to append; token_count is cached with the encoding that produced it."""

    role: str
    content: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    sources: list[dict[str, Any]] | None = None
    author: str | None = None
    token_count: int | None = None
    token_encoding: str | None = None


class ConversationStore:
    """Reads and writes conversations and their messages."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def get_or_create(self, key: ConversationKey) -> int:
        """The conversation id for a platform key, created on first use."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "INSERT INTO conversations (platform, workspace, channel, thread) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (platform, workspace, channel, thread) DO UPDATE SET updated_at = now() "
                "RETURNING id",
                (key.platform, key.workspace, key.channel, key.thread),
            )
            row = await cursor.fetchone()
        assert row is not None
        return int(row[0])

    async def find(self, key: ConversationKey) -> int | None:
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT id FROM conversations WHERE platform = %s AND workspace = %s AND channel = %s AND thread = %s",
                (key.platform, key.workspace, key.channel, key.thread),
            )
            row = await cursor.fetchone()
        return int(row[0]) if row else None

    async def exists(self, key: ConversationKey) -> bool:
        """Implements core.ports.KnownConversations."""
        return await self.find(key) is not None

    async def append(self, conversation_id: int, turn_id: uuid.UUID, messages: Sequence[NewMessage]) -> None:
        """Append one turn's messages in order, in one transaction."""
        if not messages:
            return
        async with self._db.connection() as conn:
            async with conn.cursor() as cursor:
                await cursor.executemany(
                    "INSERT INTO messages (conversation_id, turn_id, role, content, tool_calls, tool_call_id,"
                    " sources, author, token_count, token_encoding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [
                        (
                            conversation_id,
                            turn_id,
                            message.role,
                            # Text reaches here made storable where it entered (core/text_safety.py); this
                            # is the table's own guard, so no outside text that slipped past fails a turn.
                            storable(message.content),
                            Jsonb(storable_json(message.tool_calls)) if message.tool_calls is not None else None,
                            storable(message.tool_call_id) if message.tool_call_id is not None else None,
                            Jsonb(storable_json(message.sources)) if message.sources is not None else None,
                            storable(message.author) if message.author is not None else None,
                            message.token_count,
                            message.token_encoding,
                        )
                        for message in messages
                    ],
                )
            await conn.execute("UPDATE conversations SET updated_at = now() WHERE id = %s", (conversation_id,))

    async def history(self, conversation_id: int, *, max_messages: int = 4000) -> list[StoredMessage]:
        """The newest max_messages messages, oldest first, never starting mid-turn."""
        async with self._db.connection() as conn:
            async with conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(
                    "SELECT * FROM (SELECT id, turn_id, role, content, tool_calls, tool_call_id, sources, author,"
                    " token_count, token_encoding FROM messages WHERE conversation_id = %s"
                    " ORDER BY id DESC LIMIT %s) newest ORDER BY id",
                    (conversation_id, max_messages),
                )
                rows = await cursor.fetchall()
        messages = [StoredMessage(**row) for row in rows]
        if len(messages) == max_messages and messages:
            first_turn = messages[0].turn_id
            messages = [message for message in messages if message.turn_id != first_turn]
        return messages

    async def save_token_counts(self, counts: Sequence[tuple[int, int, str]]) -> None:
        """Cache recounted tokens: (message id, count, encoding name)."""
        if not counts:
            return
        async with self._db.connection() as conn:
            async with conn.cursor() as cursor:
                await cursor.executemany(
                    "UPDATE messages SET token_count = %s, token_encoding = %s WHERE id = %s",
                    [(count, encoding, message_id) for message_id, count, encoding in counts],
                )
