"""Per-conversation run serialisation: a Postgres advisory lock, so it holds across processes."""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType

import psycopg

from core.store.db import Database

log = logging.getLogger(__name__)


class ConversationLocks:
    """One run at a time per conversation; same-process waiters queue locally first to spare connections."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._local: dict[int, asyncio.Lock] = {}
        self._users: dict[int, int] = {}
        self._opened = False

    def hold(self, conversation_id: int | None) -> "HeldLock":
        return HeldLock(self, conversation_id)

    def _local_lock(self, conversation_id: int) -> asyncio.Lock:
        self._users[conversation_id] = self._users.get(conversation_id, 0) + 1
        return self._local.setdefault(conversation_id, asyncio.Lock())

    def _forget(self, conversation_id: int) -> None:
        self._users[conversation_id] -= 1
        if not self._users[conversation_id]:
            del self._users[conversation_id]
            self._local.pop(conversation_id, None)

    async def _connection(self) -> psycopg.AsyncConnection:
        pool = self._db.lock_pool
        if not self._opened:
            await pool.open(wait=False)
            self._opened = True
        return await pool.getconn()


class HeldLock:
    """The lock for one run: local lock, then a pooled connection holding the advisory lock.

    A class rather than a generator-based context manager: a run that is cancelled or abandoned
    must still unlock, and a connection whose unlock failed is closed (which ends its session
    and so its locks) instead of going back to the pool still holding the lock.
    """

    def __init__(self, locks: ConversationLocks, conversation_id: int | None) -> None:
        self._locks = locks
        self._id = conversation_id
        self._local: asyncio.Lock | None = None
        self._conn: psycopg.AsyncConnection | None = None

    async def __aenter__(self) -> None:
        if self._id is None:
            return
        self._local = self._locks._local_lock(self._id)
        try:
            await self._local.acquire()
        except BaseException:
            self._locks._forget(self._id)
            raise
        try:
            self._conn = await self._locks._connection()
            # Negative keys are conversations; positive ones are left for other locks (migrations).
            await self._conn.execute("SELECT pg_advisory_lock(%s)", (-self._id,))
        except BaseException:
            await asyncio.shield(self._release())
            raise

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.shield(self._release())

    async def _release(self) -> None:
        if self._id is None or self._local is None:
            return
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                pool = self._locks._db.lock_pool
                try:
                    await conn.execute("SELECT pg_advisory_unlock(%s)", (-self._id,))
                except Exception:
                    log.warning("could not release the lock of conversation %s; dropping its connection", self._id)
                    await conn.close()
                await pool.putconn(conn)
        finally:
            self._local.release()
            self._locks._forget(self._id)
            self._local = None
