"""One process at a time per source: a lease on the source's row, held while it ingests or syncs, renewed meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from types import TracebackType

from core.store.db import Database

log = logging.getLogger(__name__)

LEASE_S = 120.0
RENEW_EVERY_S = 30.0
# The lease is free when nobody holds it or its holder stopped renewing it (a crashed process).
_FREE = "(sync_lease_until IS NULL OR sync_lease_until < now())"
_DUE = (
    "sync_interval_s IS NOT NULL AND targets <> '[]'::jsonb"
    " AND (last_synced_at IS NULL OR last_synced_at + make_interval(secs => sync_interval_s) <= now())"
)


class SourceBusy(Exception):
    """Another process is ingesting or syncing this source now."""


def new_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


class SourceLease:
    """The right to write one source's documents; use as `async with` to renew it while held.

    A lease rather than an advisory lock, for the reason core/store/locks.py gives: a sync may run for
    minutes, and a connection held that long per source would starve the pool. Ending it records how the
    sync went (`finish`) in the same statement that frees it, so no other process ever sees the source
    free and still due after a sync that just ran.
    """

    def __init__(self, db: Database, *, source_id: int, name: str, holder: str) -> None:
        self.db = db
        self.source_id = source_id
        self.name = name
        self.holder = holder
        self._renewer: asyncio.Task[None] | None = None
        self._held = True

    @classmethod
    async def take(cls, db: Database, source_id: int, *, holder: str | None = None) -> "SourceLease":
        """Take the source's lease now, or raise SourceBusy naming who holds it."""
        holder = holder or new_holder()
        async with db.connection() as conn:
            cursor = await conn.execute(
                "UPDATE sources SET sync_holder = %s, sync_lease_until = now() + make_interval(secs => %s)"
                f" WHERE id = %s AND {_FREE} RETURNING name",
                (holder, LEASE_S, source_id),
            )
            row = await cursor.fetchone()
            if row is None:
                cursor = await conn.execute("SELECT name, sync_holder FROM sources WHERE id = %s", (source_id,))
                held = await cursor.fetchone()
                name, who = (held[0], held[1]) if held else (str(source_id), "another process")
                raise SourceBusy(f'source "{name}" is being ingested or synced by {who}; try again when it is done')
        return cls(db, source_id=source_id, name=row[0], holder=holder)

    @classmethod
    async def claim_due(cls, db: Database, *, holder: str, skip: tuple[int, ...] = ()) -> "SourceLease | None":
        """The lease of one source whose sync interval has passed and that nobody holds, or None."""
        async with db.connection() as conn:
            # SKIP LOCKED: processes claiming at the same moment take different sources; the outer WHERE
            # checks again on the row version it locks, so a source synced meanwhile is not taken.
            cursor = await conn.execute(
                "UPDATE sources SET sync_holder = %s, sync_lease_until = now() + make_interval(secs => %s)"
                f" WHERE id = (SELECT id FROM sources WHERE {_DUE} AND {_FREE} AND NOT (id = ANY(%s))"
                "  ORDER BY last_synced_at NULLS FIRST, id LIMIT 1 FOR UPDATE SKIP LOCKED)"
                f" AND {_DUE} AND {_FREE} RETURNING id, name",
                (holder, LEASE_S, list(skip)),
            )
            row = await cursor.fetchone()
        return None if row is None else cls(db, source_id=int(row[0]), name=row[1], holder=holder)

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(RENEW_EVERY_S)
            try:
                async with self.db.connection() as conn:
                    await conn.execute(
                        "UPDATE sources SET sync_lease_until = now() + make_interval(secs => %s)"
                        " WHERE id = %s AND sync_holder = %s",
                        (LEASE_S, self.source_id, self.holder),
                    )
            except Exception:  # noqa: BLE001 — a missed renewal is retried; the lease lasts 4 renewals
                log.warning("could not renew the sync lease of source %s", self.name, exc_info=True)

    async def __aenter__(self) -> "SourceLease":
        self._renewer = asyncio.create_task(self._renew_forever(), name=f"source-lease-{self.source_id}")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
            self._renewer = None
        if self._held:
            # Ended without a verdict (an exception, a cancel): give the source back untouched, due as it was.
            await asyncio.shield(self._release())

    async def _release(self) -> None:
        self._held = False
        try:
            async with self.db.connection() as conn:
                await conn.execute(
                    "UPDATE sources SET sync_holder = NULL, sync_lease_until = NULL WHERE id = %s AND sync_holder = %s",
                    (self.source_id, self.holder),
                )
        except Exception:  # noqa: BLE001 — the lease runs out by itself
            log.warning("could not give back the sync lease of source %s", self.name, exc_info=True)

    async def finish(self, *, error: str | None) -> None:
        """Record the sync's end (ok, or error with why) and free the source, in one statement."""
        self._held = False
        async with self.db.connection() as conn:
            await conn.execute(
                "UPDATE sources SET sync_status = %s, sync_error = %s, last_synced_at = now(),"
                " sync_holder = NULL, sync_lease_until = NULL WHERE id = %s AND sync_holder = %s",
                ("error" if error else "ok", error, self.source_id, self.holder),
            )
