"""Which bot processes are alive: each one stamps its row every few seconds; a stale stamp means it died."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

from core.store.db import Database
from core.store.shares import BudgetShares

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 10.0
# Three missed beats: the process is gone, and what it was streaming may be repaired by another.
STALE_AFTER_S = 30.0
STALE_AFTER_BEATS = STALE_AFTER_S / HEARTBEAT_INTERVAL_S
# A process short of its share (just joined: the others make room at their beats) looks again this often, in beats.
SHORT_RETRY_BEATS = 0.1


def process_identity() -> str:
    """This process, unique across hosts and restarts (a restarted process is a new owner)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Heartbeats:
    """The heartbeat of one process (`owner`), and with it the process's budget shares (`shares`, core/store/shares.py).

    `interval_s` (HEARTBEAT_INTERVAL_S, at most the default): the beat; a process whose stamp is STALE_AFTER_BEATS
    beats old no longer counts for the shares. Other stores' stale time stays STALE_AFTER_S, never shorter.
    `prompt`: beats between beats when the shares want one (a scope served for the first time, a share short of its
    1/N); off, it beats only when `beat` is called."""

    def __init__(self, db: Database, *, owner: str, interval_s: float = HEARTBEAT_INTERVAL_S, prompt: bool = True) -> None:
        self._db = db
        self.owner = owner
        self.interval_s = interval_s
        self.shares = BudgetShares(owner=owner, stale_after_s=STALE_AFTER_BEATS * interval_s)
        self.shares.wake = self._beat_soon if prompt else None
        self._prompt = prompt
        self._beating = asyncio.Lock()
        self._soon: asyncio.Task[None] | None = None
        self._again = False
        self._again_after_s = 0.0

    async def beat(self) -> None:
        async with self._beating:
            try:
                async with self._db.connection() as conn:
                    await self.shares.refresh(conn)
            except BaseException:
                self.shares.unreachable()
                raise
            self.shares.committed()
        if self._prompt and self.shares.short:
            self._beat_soon(after_s=SHORT_RETRY_BEATS * self.interval_s)

    def _beat_soon(self, *, after_s: float = 0.0) -> None:
        """A scope served for the first time is counted now, not at the next scheduled beat; a share still short of
        its 1/N is looked at again `after_s` from now."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._again_after_s = min(self._again_after_s, after_s) if self._again else after_s
        self._again = True
        if self._soon is None or self._soon.done():
            self._soon = loop.create_task(self._beat_quietly(), name="heartbeat-now")

    async def _beat_quietly(self) -> None:
        while self._again:
            await asyncio.sleep(self._again_after_s)
            self._again = False
            try:
                await self.beat()
            except Exception as error:
                log.warning("could not count a new budget share now (%s); the next beat tries again", type(error).__name__)
                return

    async def stop(self) -> None:
        """A clean exit: its leftovers need not wait for the stamp to go stale (nor its shares)."""
        if self._soon is not None:
            self._soon.cancel()
        async with self._db.connection() as conn:
            await conn.execute("DELETE FROM process_heartbeats WHERE owner = %s", (self.owner,))
