"""Retrieval tables in Postgres: sources, per-model vector indexes, and the SQL pieces search shares."""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from psycopg import AsyncConnection, sql

from core.store.db import Database

SourceExposure = Literal["prefetch", "agentic_tool", "off"]
EXPOSURES: tuple[SourceExposure, ...] = ("prefetch", "agentic_tool", "off")
SourceKind = Literal["files", "urls", "mixed"]
# pgvector's HNSW indexes hold vectors of at most this many dimensions.
HNSW_MAX_DIMENSIONS = 2000
# Serialises CREATE INDEX IF NOT EXISTS between ingesters (it can race on the catalog otherwise).
INDEX_LOCK_KEY = zlib.crc32(b"relaybot-retrieval-index")


@dataclass(frozen=True, kw_only=True)
class SourceRow:
    """A source as `sources list` shows it."""

    id: int
    name: str
    kind: str
    uri: str
    exposure: str
    sync_interval_s: int | None
    last_synced_at: datetime | None
    documents: int
    chunks: int


def vector_index_name(model: str, dimension: int) -> str:
    """A stable index name for one model and dimension (model names hold characters SQL names cannot)."""
    digest = hashlib.sha256(model.encode("utf-8")).hexdigest()[:16]
    return f"chunk_embeddings_hnsw_{digest}_{dimension}"


def vector_expression(dimension: int) -> sql.Composable:
    """The indexed expression; queries must spell it the same way for the planner to use the index."""
    return sql.SQL("(embedding::vector({}))").format(sql.Literal(dimension))


def vector_predicate(model: str, dimension: int) -> sql.Composable:
    """The partial-index predicate, as literals: a parameter would not let the planner match the index."""
    return sql.SQL("model = {} AND vector_dims(embedding) = {}").format(sql.Literal(model), sql.Literal(dimension))


async def ensure_vector_index(
    db: Database, *, model: str, dimension: int, build_memory: str | None = None
) -> bool:
    """Create the HNSW cosine index for this model and dimension if missing; False when too wide to index.

    build_memory (e.g. "1GB") sets maintenance_work_mem for the build: an HNSW graph built over
    existing rows is much faster when it fits in memory. On an empty table it does not matter.
    """
    if dimension > HNSW_MAX_DIMENSIONS:
        return False
    statement = sql.SQL(
        "CREATE INDEX IF NOT EXISTS {name} ON chunk_embeddings USING hnsw ({expr} vector_cosine_ops) WHERE {pred}"
    ).format(
        name=sql.Identifier(vector_index_name(model, dimension)),
        expr=vector_expression(dimension),
        pred=vector_predicate(model, dimension),
    )
    async with db.connection() as conn:
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (INDEX_LOCK_KEY,))
        if build_memory is not None:
            await conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (build_memory,))
        await conn.execute(statement)
    return True


async def upsert_source(
    conn: AsyncConnection, *, name: str, kind: SourceKind, uri: str, exposure: SourceExposure
) -> int:
    """Create the source or update how it is exposed; returns its id."""
    cursor = await conn.execute(
        "INSERT INTO sources (name, kind, uri, exposure) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (name) DO UPDATE SET "
        " kind = CASE WHEN sources.kind = EXCLUDED.kind THEN sources.kind ELSE 'mixed' END,"
        " uri = EXCLUDED.uri, exposure = EXCLUDED.exposure, updated_at = now() "
        "RETURNING id",
        (name, kind, uri, exposure),
    )
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def mark_synced(db: Database, source_id: int) -> None:
    async with db.connection() as conn:
        await conn.execute("UPDATE sources SET last_synced_at = now() WHERE id = %s", (source_id,))


async def list_sources(db: Database) -> list[SourceRow]:
    """Every source with its document and chunk counts, by name."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT s.id, s.name, s.kind, s.uri, s.exposure, s.sync_interval_s, s.last_synced_at,"
            " (SELECT count(*) FROM documents d WHERE d.source_id = s.id),"
            " (SELECT count(*) FROM chunks c WHERE c.source_id = s.id) "
            "FROM sources s ORDER BY s.name"
        )
        rows = await cursor.fetchall()
    return [
        SourceRow(
            id=row[0],
            name=row[1],
            kind=row[2],
            uri=row[3],
            exposure=row[4],
            sync_interval_s=row[5],
            last_synced_at=row[6],
            documents=int(row[7]),
            chunks=int(row[8]),
        )
        for row in rows
    ]


async def remove_source(db: Database, name: str) -> bool:
    """Delete a source with its documents, chunks and embeddings; False when there is no such source."""
    async with db.connection() as conn:
        cursor = await conn.execute("DELETE FROM sources WHERE name = %s RETURNING id", (name,))
        return await cursor.fetchone() is not None
