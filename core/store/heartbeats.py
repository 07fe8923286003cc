"""Which bot processes are alive: each one stamps its row every few seconds; a stale stamp means it died."""

from __future__ import annotations

import os
import socket
import uuid

from core.store.db import Database

HEARTBEAT_INTERVAL_S = 10.0
# Three missed beats: the process is gone, and what it was streaming may be repaired by another.
STALE_AFTER_S = 30.0


def process_identity() -> str:
    """This process, unique across hosts and restarts (a restarted process is a new owner)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Heartbeats:
    """The heartbeat of one process (`owner`)."""

    def __init__(self, db: Database, *, owner: str) -> None:
        self._db = db
        self.owner = owner

    async def beat(self) -> None:
        async with self._db.connection() as conn:
            await conn.execute(
                "INSERT INTO process_heartbeats (owner, seen_at) VALUES (%s, now())"
                " ON CONFLICT (owner) DO UPDATE SET seen_at = now()",
                (self.owner,),
            )

    async def stop(self) -> None:
        """A clean exit: its leftovers need not wait for the stamp to go stale."""
        async with self._db.connection() as conn:
            await conn.execute("DELETE FROM process_heartbeats WHERE owner = %s", (self.owner,))
