"""Per-conversation run serialisation across processes: a lease row in Postgres, renewed while held."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from types import TracebackType

from core.store.db import Database

log = logging.getLogger(__name__)

LEASE_S = 60.0
RENEW_EVERY_S = 20.0
# A renewal that failed (a database blip) is tried again this soon, doubling up to RENEW_EVERY_S: waiting the
# full interval would let a 40 s failover run the lease out while its run still goes.
RENEW_RETRY_FIRST_S = 1.0
POLL_FIRST_S = 0.05
POLL_MAX_S = 0.5
GIVE_BACK_ATTEMPTS = 2


class ConversationLocks:
    """One run at a time per conversation.

    A lease row rather than a session advisory lock: an advisory lock needs a connection held for
    the whole run, which caps concurrent answers at a pool's size and multiplies connections by
    processes. A lease costs one statement to take, one per RENEW_EVERY_S, one to give back; a
    crashed holder's lease simply runs out. Same-process waiters queue on an asyncio lock first.
    """

    def __init__(self, db: Database, *, renew_every_s: float = RENEW_EVERY_S) -> None:
        self._db = db
        self.renew_every_s = renew_every_s
        self._local: dict[int, asyncio.Lock] = {}
        self._users: dict[int, int] = {}
        self._instance = f"{socket.gethostname()}:{os.getpid()}"

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

    def _new_holder(self) -> str:
        return f"{self._instance}:{uuid.uuid4().hex}"

    async def _try_take(self, conversation_id: int, holder: str) -> bool:
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "INSERT INTO conversation_leases (conversation_id, holder, expires_at)"
                " VALUES (%s, %s, now() + make_interval(secs => %s))"
                " ON CONFLICT (conversation_id) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at"
                " WHERE conversation_leases.expires_at < now() RETURNING 1",
                (conversation_id, holder, LEASE_S),
            )
            return await cursor.fetchone() is not None

    async def _renew(self, conversation_id: int, holder: str) -> bool:
        """Extends the lease if `holder` still has it; False when it ran out and another run took it (or gave
        it back) meanwhile. A lease that ran out but nobody took is still this holder's, and is extended."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "UPDATE conversation_leases SET expires_at = now() + make_interval(secs => %s)"
                " WHERE conversation_id = %s AND holder = %s RETURNING 1",
                (LEASE_S, conversation_id, holder),
            )
            return await cursor.fetchone() is not None

    async def _give_back(self, conversation_id: int, holder: str) -> None:
        async with self._db.connection() as conn:
            await conn.execute(
                "DELETE FROM conversation_leases WHERE conversation_id = %s AND holder = %s", (conversation_id, holder)
            )


class HeldLock:
    """The lock for one run; a class so a cancelled or abandoned run still gives its lease back."""

    def __init__(self, locks: ConversationLocks, conversation_id: int | None) -> None:
        self._locks = locks
        self._id = conversation_id
        self._local: asyncio.Lock | None = None
        self._holder: str | None = None
        self._renewer: asyncio.Task[None] | None = None

    async def __aenter__(self) -> None:
        if self._id is None:
            return
        self._local = self._locks._local_lock(self._id)
        try:
            await self._local.acquire()
        except BaseException:
            self._locks._forget(self._id)
            self._local = None
            raise
        try:
            holder = self._locks._new_holder()
            pause = POLL_FIRST_S
            while not await self._locks._try_take(self._id, holder):
                # Another process runs this conversation; contention is rare, so polling is cheap.
                await asyncio.sleep(pause)
                pause = min(POLL_MAX_S, pause * 2)
            self._holder = holder
            owner = asyncio.current_task()
            assert owner is not None
            self._renewer = asyncio.create_task(self._keep_renewing(self._id, holder, owner))
        except BaseException:
            await asyncio.shield(self._release())
            raise

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.shield(self._release())

    async def _keep_renewing(self, conversation_id: int, holder: str, owner: asyncio.Task[object]) -> None:
        every = self._locks.renew_every_s
        pause, retry = every, min(every, RENEW_RETRY_FIRST_S)
        while True:
            await asyncio.sleep(pause)
            try:
                held = await self._locks._renew(conversation_id, holder)
            except Exception:
                pause, retry = retry, min(every, retry * 2)
                log.warning("could not renew the lease of conversation %s; retrying in %.0f s", conversation_id, pause,
                            exc_info=True)
                continue
            if not held:
                # Another run has the conversation now: this one must not go on writing its turn beside it.
                log.error("the lease of conversation %s ran out and another run took it; cancelling this run",
                          conversation_id)
                self._holder = None
                owner.cancel(msg="conversation lease lost")
                return
            pause, retry = every, min(every, RENEW_RETRY_FIRST_S)

    async def _give_back(self, holder: str) -> None:
        assert self._id is not None
        # A second try gets another pooled connection: the first may have died with a database blip.
        for attempt in range(GIVE_BACK_ATTEMPTS):
            try:
                await self._locks._give_back(self._id, holder)
                return
            except Exception:
                if attempt == GIVE_BACK_ATTEMPTS - 1:
                    log.warning("could not give back the lease of conversation %s; it runs out in %ss", self._id, LEASE_S)

    async def _release(self) -> None:
        if self._id is None or self._local is None:
            return
        renewer, self._renewer = self._renewer, None
        holder, self._holder = self._holder, None
        try:
            if renewer is not None:
                renewer.cancel()
            if holder is not None:
                await self._give_back(holder)
        finally:
            self._local.release()
            self._locks._forget(self._id)
            self._local = None
