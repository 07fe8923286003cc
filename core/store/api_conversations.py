"""API conversations: which key owns one, and the latest paused run of one (what a continuation resumes)."""

from __future__ import annotations

import uuid

from core.api_access import API_PLATFORM, api_conversation_key, api_key_workspace
from core.store.db import Database
from core.text_safety import is_storable


class ApiConversations:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def exists(self, key_id: int, conversation: str) -> bool:
        if not is_storable(conversation):
            return False  # nothing stored has that id (and Postgres cannot be asked: a NUL fails the parameter)
        key = api_conversation_key(key_id, conversation)
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT 1 FROM conversations WHERE platform = %s AND workspace = %s AND channel = %s AND thread = %s",
                (key.platform, key.workspace, key.channel, key.thread),
            )
            return await cursor.fetchone() is not None

    async def latest_continuation(self, key_id: int, conversation: str) -> uuid.UUID | None:
        """The newest paused run of this key's conversation, whatever became of it (the approval service says)."""
        if not is_storable(conversation):
            return None
        key = api_conversation_key(key_id, conversation)
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT k.id FROM continuations k JOIN conversations c ON c.id = k.conversation_id"
                " WHERE c.platform = %s AND c.workspace = %s AND c.channel = %s AND c.thread = %s"
                " ORDER BY k.created_at DESC LIMIT 1",
                (key.platform, key.workspace, key.channel, key.thread),
            )
            row = await cursor.fetchone()
        return row[0] if row else None

    async def conversation_of(self, key_id: int, continuation: uuid.UUID) -> str | None:
        """The conversation of this key that a paused run belongs to; None when it is not this key's."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT c.thread FROM continuations k JOIN conversations c ON c.id = k.conversation_id"
                " WHERE k.id = %s AND c.platform = %s AND c.workspace = %s",
                (continuation, API_PLATFORM, api_key_workspace(key_id)),
            )
            row = await cursor.fetchone()
        return row[0] if row else None
