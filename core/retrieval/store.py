"""Retrieval tables in Postgres: sources, per-model vector indexes, and the SQL pieces search shares."""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from datetime import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pgvector import Vector
from psycopg import AsyncConnection, sql

from core.retrieval.links import LinkBaseError
from core.store.db import Database

if TYPE_CHECKING:
    from core.retrieval.chunking import Chunk

SourceExposure = Literal["prefetch", "agentic_tool", "off"]
EXPOSURES: tuple[SourceExposure, ...] = ("prefetch", "agentic_tool", "off")
SourceKind = Literal["files", "urls", "mixed"]
# pgvector's HNSW indexes hold vectors of at most this many dimensions.
HNSW_MAX_DIMENSIONS = 2000
# Serialises CREATE INDEX IF NOT EXISTS between ingesters (it can race on the catalog otherwise).
INDEX_LOCK_KEY = zlib.crc32(b"relaybot-retrieval-index")
# How the HNSW graph is built. bench/conversations.py (200k clustered 384-d chunks, filtered to half of them):
# recall@10 at ef_search 150 was 0.93-0.95 with pgvector's default ef_construction 64 (0.95-0.97 even at
# ef_search 300: the graph, not the search, was the limit) and 0.987-0.997 at 128, for a build 1.4 times as
# long. Part of the index's name, so an index built another way is replaced at the next ingest, not kept.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 128


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
    link_base: str | None = None  # where its files are read on the web (core/retrieval/links.py)
    link_root: str | None = None  # the folder their paths are taken relative to
    owner: str = ""  # the team it belongs to (`slack:T1`, `discord:G1`); '' for the deployment's own


class SourceOwnedElsewhere(ValueError):
    """A source name already used by another team (or by the deployment): names are unique across teams, and
    one team never writes into another's source. The message is the sentence the CLI prints."""

    def __init__(self, name: str, owner: str) -> None:
        held = f"team {owner}" if owner else "this deployment (no team)"
        super().__init__(f'the source "{name}" belongs to {held}; choose another name, or --team to match it')


def vector_index_prefix(model: str, dimension: int) -> str:
    """What every index of one model and dimension is named from (model names hold characters SQL names cannot)."""
    digest = hashlib.sha256(model.encode("utf-8")).hexdigest()[:16]
    return f"chunk_embeddings_hnsw_{digest}_{dimension}"


def vector_index_name(model: str, dimension: int) -> str:
    """The index of one model and dimension as this version builds it: its build parameters are in the name."""
    return f"{vector_index_prefix(model, dimension)}_m{HNSW_M}e{HNSW_EF_CONSTRUCTION}"


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

    An index of the same model and dimension built with other parameters (an earlier version's) is dropped once
    the new one exists: until then searches use the old one. build_memory (e.g. "1GB") sets maintenance_work_mem
    for the build: an HNSW graph built over existing rows is much faster when it fits in memory. On an empty table
    it does not matter.
    """
    if dimension > HNSW_MAX_DIMENSIONS:
        return False
    name = vector_index_name(model, dimension)
    statement = sql.SQL(
        "CREATE INDEX IF NOT EXISTS {name} ON chunk_embeddings USING hnsw ({expr} vector_cosine_ops) "
        "WITH (m = {m}, ef_construction = {ef}) WHERE {pred}"
    ).format(
        name=sql.Identifier(name),
        expr=vector_expression(dimension),
        m=sql.Literal(HNSW_M),
        ef=sql.Literal(HNSW_EF_CONSTRUCTION),
        pred=vector_predicate(model, dimension),
    )
    async with db.connection() as conn:
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (INDEX_LOCK_KEY,))
        if build_memory is not None:
            await conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (build_memory,))
        await conn.execute(statement)
        cursor = await conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'chunk_embeddings' AND indexname <> %s"
            " AND (indexname = %s OR starts_with(indexname, %s))",
            (name, vector_index_prefix(model, dimension), vector_index_prefix(model, dimension) + "_m"),
        )
        for (stale,) in await cursor.fetchall():
            await conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(stale)))
    return True


async def upsert_source(
    conn: AsyncConnection,
    *,
    name: str,
    kind: SourceKind,
    uri: str,
    exposure: SourceExposure,
    link_base: str | None = None,
    link_root: str | None = None,
    owner: str = "",
) -> int:
    """Create the source (owned by `owner`: a team, or '' for the deployment) or update how it is exposed; returns
    its id. SourceOwnedElsewhere when the name is another owner's: an ingest never writes into another team's source.

    A link base given sets the base and its root together. Without one the base stays, and so does
    its root: re-ingesting part of a folder must not move where the other files' links point. A
    source with no base yet records the new root, for `sources set-link-base` to use later.
    """
    cursor = await conn.execute(
        "INSERT INTO sources (name, kind, uri, exposure, link_base, link_root, owner) VALUES (%s, %s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (name) DO UPDATE SET "
        " kind = CASE WHEN sources.kind = EXCLUDED.kind THEN sources.kind ELSE 'mixed' END,"
        " uri = EXCLUDED.uri, exposure = EXCLUDED.exposure,"
        " link_base = coalesce(EXCLUDED.link_base, sources.link_base),"
        " link_root = CASE WHEN EXCLUDED.link_base IS NOT NULL THEN EXCLUDED.link_root"
        "  WHEN sources.link_base IS NULL THEN coalesce(EXCLUDED.link_root, sources.link_root)"
        "  ELSE sources.link_root END,"
        " updated_at = now() "
        "WHERE sources.owner = EXCLUDED.owner "
        "RETURNING id",
        (name, kind, uri, exposure, link_base, link_root, owner),
    )
    row = await cursor.fetchone()
    if row is None:
        cursor = await conn.execute("SELECT owner FROM sources WHERE name = %s", (name,))
        held = await cursor.fetchone()
        raise SourceOwnedElsewhere(name, held[0] if held else "")
    return int(row[0])


async def list_sources(db: Database, *, owner: str | None = None) -> list[SourceRow]:
    """Every source (of one owner, when given: a team, or '' for the deployment's) with its document and chunk
    counts, by name."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT s.id, s.name, s.kind, s.uri, s.exposure, s.sync_interval_s, s.last_synced_at,"
            " (SELECT count(*) FROM documents d WHERE d.source_id = s.id),"
            " (SELECT count(*) FROM chunks c WHERE c.source_id = s.id), s.link_base, s.link_root, s.owner "
            "FROM sources s WHERE (%s::text IS NULL OR s.owner = %s::text) ORDER BY s.name",
            (owner, owner),
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
            link_base=row[9],
            link_root=row[10],
            owner=row[11],
        )
        for row in rows
    ]


async def set_link_base(
    db: Database, name: str, link_base: str | None, *, root: str | None = None, owner: str | None = None
) -> SourceRow | None:
    """Set (or, with None, clear) where a source's files are read on the web; `root` replaces the folder
    their paths are taken relative to (default: the one recorded at ingest). None when there is no such
    source (of `owner`, when given); LinkBaseError when a base is set with no root known."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT link_root FROM sources WHERE name = %s AND (%s::text IS NULL OR owner = %s::text) FOR UPDATE",
            (name, owner, owner),
        )
        row = await cursor.fetchone()
        if row is None:
            return None
        root = root or row[0]
        if link_base is not None and not root:
            raise LinkBaseError(
                f'source "{name}" was ingested before link bases existed; name the folder its files were '
                "ingested from with --root"
            )
        await conn.execute(
            "UPDATE sources SET link_base = %s, link_root = %s, updated_at = now() WHERE name = %s",
            (link_base, root, name),
        )
    return next((source for source in await list_sources(db) if source.name == name), None)


async def remove_source(db: Database, name: str, *, owner: str | None = None) -> bool:
    """Delete a source with its documents, chunks and embeddings; False when there is no such source (of `owner`,
    when given: one team never removes another's)."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "DELETE FROM sources WHERE name = %s AND (%s::text IS NULL OR owner = %s::text) RETURNING id",
            (name, owner, owner),
        )
        return await cursor.fetchone() is not None


async def set_owner(db: Database, name: str, owner: str) -> bool:
    """Give a source to a team (`slack:T1`), or with '' back to the deployment; False when there is no such source.
    Its grants stay: a grant to another team's channel is never searched (core/retrieval/retriever.py)."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "UPDATE sources SET owner = %s, updated_at = now() WHERE name = %s RETURNING id", (owner, name)
        )
        return await cursor.fetchone() is not None


async def adopt_deployment_sources(db: Database, owner: str) -> list[str]:
    """Make `owner` (the team `relaybot teams import` turns SLACK_BOT_TOKEN into) the owner of every source that has
    none: in single-workspace mode they were that team's, and in multi-workspace mode no Slack team searches the
    deployment's. Returns their names; nothing else changes (documents, grants, syncs stay)."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "UPDATE sources SET owner = %s, updated_at = now() WHERE owner = '' RETURNING name", (owner,)
        )
        return sorted(row[0] for row in await cursor.fetchall())


async def insert_chunks(
    conn: AsyncConnection, *, document_id: int, source_id: int, chunks: Sequence[Chunk],
    vectors: Sequence[Sequence[float]] | None, model: str | None,
) -> list[int]:
    """A document's chunks, and their vectors by `model` when given, in one round trip each; the chunks' ids."""
    async with conn.cursor() as cur:
        await cur.executemany(
            "INSERT INTO chunks (document_id, source_id, ord, text, heading_path, title, token_count)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id",
            [(document_id, source_id, c.order, c.text, list(c.heading_path), c.title, c.token_count) for c in chunks],
            returning=True,
        )
        chunk_ids = []
        while True:
            fetched = await cur.fetchone()
            if fetched is not None:
                chunk_ids.append(int(fetched[0]))
            if not cur.nextset():
                break
    if vectors:
        await insert_vectors(conn, source_id=source_id, chunk_ids=chunk_ids, vectors=vectors, model=model)
    return chunk_ids


async def insert_vectors(
    conn: AsyncConnection, *, source_id: int, chunk_ids: Sequence[int], vectors: Sequence[Sequence[float]],
    model: str | None,
) -> None:
    async with conn.cursor() as cur:
        await cur.executemany(
            "INSERT INTO chunk_embeddings (chunk_id, model, source_id, embedding) VALUES (%s, %s, %s, %s)",
            [(cid, model, source_id, Vector(list(v))) for cid, v in zip(chunk_ids, vectors)],
        )

