"""Keep sources fresh: read each due source again from the targets it remembers, one process per source at a time."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from core.retrieval.crawl import FetchPolicy
from core.retrieval.embeddings import EmbeddingProvider
from core.retrieval.ingest import IngestSummary, ProgressCallback, read_targets, unreachable_error
from core.retrieval.source_lease import SourceLease, new_holder
from core.retrieval.targets import load_targets
from core.store.db import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class SyncResult:
    """How one source's sync went: ok, or error with why (then nothing was pruned)."""

    source: str
    status: Literal["ok", "error"]
    summary: IngestSummary | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class SyncState:
    """A source's sync facts for `sources list`."""

    name: str
    targets: int
    sync_interval_s: int | None
    status: str | None  # 'ok', 'error', or None before the first sync since targets were recorded
    error: str | None
    syncing_by: str | None  # the process holding the source's lease now


class SourceSyncer:
    """Syncs sources for one process: due ones on a schedule, or named ones on demand.

    Every process may run one; the source lease (core/retrieval/source_lease.py) sees that each source is
    synced by one of them at a time, and its end, stamped with the lease's release, makes it not due.
    """

    def __init__(
        self, db: Database, *, embedder: EmbeddingProvider | None, policy: FetchPolicy, holder: str | None = None
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.policy = policy
        self.holder = holder or new_holder()

    async def run_due(self) -> list[SyncResult]:
        """Sync every source whose interval has passed and that no other process is syncing, one by one."""
        results: list[SyncResult] = []
        done: list[int] = []
        while (lease := await SourceLease.claim_due(self.db, holder=self.holder, skip=tuple(done))) is not None:
            done.append(lease.source_id)
            results.append(await self._sync(lease))
        return results

    async def sync(self, source_id: int, *, progress: ProgressCallback | None = None) -> SyncResult:
        """Sync one source now, due or not; raises SourceBusy when another process is at it."""
        lease = await SourceLease.take(self.db, source_id, holder=self.holder)
        return await self._sync(lease, progress=progress)

    async def _sync(self, lease: SourceLease, *, progress: ProgressCallback | None = None) -> SyncResult:
        async with lease:
            try:
                async with self.db.connection() as conn:
                    specs = await load_targets(conn, lease.source_id)
                if not specs:
                    error = "it remembers no targets; ingest it again to record them"
                    await lease.finish(error=error)
                    return SyncResult(source=lease.name, status="error", error=error)
                summary = await read_targets(
                    self.db, lease.source_id, specs, embedder=self.embedder, policy=self.policy, prune=True,
                    progress=progress,
                )
            except Exception as exc:  # noqa: BLE001 — one source failing (database, embeddings) must not stop the rest
                log.exception("syncing source %s failed", lease.name)
                error = f"the sync failed: {type(exc).__name__}: {exc}"
                await lease.finish(error=error)
                return SyncResult(source=lease.name, status="error", error=error)
            error = unreachable_error(summary)
            await lease.finish(error=error)
        if error:
            log.warning("source %s: %s; nothing was pruned", lease.name, error)
        else:
            log.info(
                "source %s synced: %d added, %d updated, %d unchanged, %d removed",
                lease.name, summary.added, summary.updated, summary.unchanged, summary.removed,
            )
        return SyncResult(source=lease.name, status="error" if error else "ok", summary=summary, error=error)


async def sync_states(db: Database) -> dict[str, SyncState]:
    """Each source's sync facts, by name."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT name, jsonb_array_length(targets), sync_interval_s, sync_status, sync_error,"
            " CASE WHEN sync_lease_until >= now() THEN sync_holder END FROM sources"
        )
        rows = await cursor.fetchall()
    return {
        row[0]: SyncState(
            name=row[0], targets=int(row[1]), sync_interval_s=row[2], status=row[3], error=row[4], syncing_by=row[5]
        )
        for row in rows
    }


async def source_ids(db: Database, name: str | None = None) -> dict[str, int]:
    """The id of the named source (empty when there is none), or of every source that remembers targets."""
    async with db.connection() as conn:
        if name is not None:
            cursor = await conn.execute("SELECT name, id FROM sources WHERE name = %s", (name,))
        else:
            cursor = await conn.execute("SELECT name, id FROM sources WHERE targets <> '[]'::jsonb ORDER BY name")
        return {row[0]: int(row[1]) for row in await cursor.fetchall()}
