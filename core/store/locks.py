"""Per-conversation run serialisation: a Postgres advisory lock, so it holds across processes."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

from core.store.db import Database


class ConversationLocks:
    """One run at a time per conversation; same-process waiters queue locally first to spare connections."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._local: dict[int, asyncio.Lock] = {}
        self._users: dict[int, int] = {}
        self._opened = False

    @asynccontextmanager
    async def hold(self, conversation_id: int | None) -> AsyncIterator[None]:
        if conversation_id is None:
            yield
            return
        lock = self._local.setdefault(conversation_id, asyncio.Lock())
        self._users[conversation_id] = self._users.get(conversation_id, 0) + 1
        try:
            async with lock:
                pool = self._db.lock_pool
                if not self._opened:
                    await pool.open(wait=False)
                    self._opened = True
                async with pool.connection() as conn:
                    # Negative keys are conversations; positive ones are left for other locks (migrations).
                    await conn.execute("SELECT pg_advisory_lock(%s)", (-conversation_id,))
                    try:
                        yield
                    finally:
                        await conn.execute("SELECT pg_advisory_unlock(%s)", (-conversation_id,))
        finally:
            self._users[conversation_id] -= 1
            if not self._users[conversation_id]:
                del self._users[conversation_id]
                self._local.pop(conversation_id, None)
