"""Hybrid search: pgvector cosine (HNSW) and Postgres full text, fused by reciprocal rank."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from pgvector import Vector
from psycopg import AsyncConnection, sql

from core.events import SourceItem
from core.retrieval.chunking import HEADING_PATH_SEPARATOR
from core.retrieval.embeddings import EmbeddingError, EmbeddingProvider
from core.retrieval.store import vector_expression, vector_predicate
from core.retriever import Exposure
from core.store.db import Database

log = logging.getLogger(__name__)

RRF_K = 60
# Each branch contributes this many candidates per requested result (at least CANDIDATES_MIN).
CANDIDATES_PER_RESULT = 4
CANDIDATES_MIN = 20
# HNSW search breadth; bench/retrieval.py measures recall@10 >= 0.95 at this value on 100k chunks.
EF_SEARCH = 100
# The full-text branch ranks at most this many matches per tier: ranking every match of a common
# word costs 80-130 ms on 100k chunks, ranking a bounded set a few ms.
FULLTEXT_RANK_CANDIDATES = 300
TS_CONFIG = "english"

# Two tiers: chunks matching every term (websearch syntax: quotes, -, or), then chunks matching any.
_FULLTEXT_SQL = """
WITH all_terms AS (
    SELECT c.id, c.tsv FROM chunks c
    WHERE c.tsv @@ websearch_to_tsquery('{config}', %(q)s) {filter}
    LIMIT %(n)s
), any_term AS (
    SELECT c.id, c.tsv FROM chunks c
    WHERE c.tsv @@ replace(plainto_tsquery('{config}', %(q)s)::text, ' & ', ' | ')::tsquery {filter}
    LIMIT %(n)s
), ranked AS (
    SELECT id, 1.0 + ts_rank_cd(tsv, websearch_to_tsquery('{config}', %(q)s), 1) AS score FROM all_terms
    UNION ALL
    SELECT id, ts_rank_cd(tsv, replace(plainto_tsquery('{config}', %(q)s)::text, ' & ', ' | ')::tsquery, 1)
    FROM any_term
)
SELECT id, max(score) AS score FROM ranked GROUP BY id ORDER BY score DESC, id LIMIT %(k)s
"""


@dataclass(frozen=True, kw_only=True)
class ChunkHit:
    """One ranked chunk with what a citation needs."""

    chunk_id: int
    score: float
    text: str
    title: str
    heading_path: tuple[str, ...]
    uri: str
    source: str
    token_count: int

    def as_source_item(self) -> SourceItem:
        title = HEADING_PATH_SEPARATOR.join(p for p in (self.title, *self.heading_path) if p) or self.uri
        return SourceItem(
            title=title, uri=self.uri, text=self.text, source=self.source, score=self.score, chunk_id=self.chunk_id
        )


def vector_statement(model: str, dimension: int, *, filtered: bool) -> sql.Composed:
    """Nearest chunks by cosine distance, spelled so the planner can use the model's partial HNSW index."""
    return sql.SQL(
        "SELECT chunk_id, {expr} <=> %(v)s::vector({dim}) AS distance FROM chunk_embeddings "
        "WHERE {pred}{filter} ORDER BY {expr} <=> %(v)s::vector({dim}) LIMIT %(k)s"
    ).format(
        expr=vector_expression(dimension),
        dim=sql.Literal(dimension),
        pred=vector_predicate(model, dimension),
        filter=sql.SQL(" AND source_id = ANY(%(ids)s)") if filtered else sql.SQL(""),
    )


def fulltext_statement(*, filtered: bool) -> bytes:
    """Full-text candidates, bounded per tier, ranked by ts_rank_cd."""
    return _FULLTEXT_SQL.format(
        config=TS_CONFIG, filter=" AND c.source_id = ANY(%(ids)s)" if filtered else ""
    ).encode("utf-8")


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], *, k: int = RRF_K) -> list[tuple[int, float]]:
    """Fuse ranked id lists: score = sum of 1 / (k + rank), rank from 1; best first, ties by id."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, chunk_id in enumerate(ranking, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))


def fit_budget(hits: Sequence[ChunkHit], *, limit: int, token_budget: int | None) -> list[ChunkHit]:
    """The best hits, at most limit, whose token counts sum within the budget (a chunk too big is passed over)."""
    chosen: list[ChunkHit] = []
    used = 0
    for hit in hits:
        if len(chosen) >= limit:
            break
        if token_budget is not None and used + hit.token_count > token_budget:
            continue
        chosen.append(hit)
        used += hit.token_count
    return chosen


class PgRetriever:
    """The Retriever over the retrieval tables; with no embedder it searches by words only."""

    def __init__(
        self,
        db: Database,
        embedder: EmbeddingProvider | None,
        *,
        ef_search: int = EF_SEARCH,
        fulltext_candidates: int = FULLTEXT_RANK_CANDIDATES,
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.ef_search = ef_search
        self.fulltext_candidates = fulltext_candidates

    async def has_sources(self, exposure: Exposure) -> bool:
        async with self.db.connection() as conn:
            cursor = await conn.execute(
                "SELECT EXISTS (SELECT 1 FROM sources s WHERE s.exposure = %s"
                " AND EXISTS (SELECT 1 FROM documents d WHERE d.source_id = s.id))",
                (exposure,),
            )
            row = await cursor.fetchone()
        return bool(row and row[0])

    async def search(
        self,
        query: str,
        *,
        limit: int,
        token_budget: int | None = None,
        exposure: Exposure | None = None,
        sources: Sequence[str] | None = None,
    ) -> list[SourceItem]:
        hits = await self.search_chunks(
            query, limit=limit, token_budget=token_budget, exposure=exposure, sources=sources
        )
        return [hit.as_source_item() for hit in hits]

    async def embed_query(self, query: str) -> list[float] | None:
        if self.embedder is None:
            return None
        try:
            vectors = await self.embedder.embed([query])
        except EmbeddingError as error:
            log.warning("query embedding failed, searching by words only: %s", error)
            return None
        return vectors[0] if vectors else None

    async def search_chunks(
        self,
        query: str,
        *,
        limit: int,
        token_budget: int | None = None,
        exposure: Exposure | None = None,
        sources: Sequence[str] | None = None,
        query_vector: Sequence[float] | None = None,
    ) -> list[ChunkHit]:
        """Ranked chunks; query_vector skips embedding the query (the bench passes its own)."""
        if limit <= 0 or not query.strip() or (token_budget is not None and token_budget <= 0):
            return []
        if query_vector is None:
            query_vector = await self.embed_query(query)
        # Some hits are passed over by the token budget; fetch enough to still fill the limit.
        k = max(CANDIDATES_MIN, limit * CANDIDATES_PER_RESULT)
        async with self.db.connection() as conn:
            source_ids = await self._allowed_sources(conn, exposure=exposure, sources=sources)
            if source_ids is not None and not source_ids:
                return []
            rankings = []
            if query_vector is not None and self.embedder is not None:
                rankings.append(await self._vector_ranking(conn, query_vector, k=k, source_ids=source_ids))
            rankings.append(await self._fulltext_ranking(conn, query, k=k, source_ids=source_ids))
            fused = reciprocal_rank_fusion(rankings)
            hits = await self._hits(conn, fused)
        return fit_budget(hits, limit=limit, token_budget=token_budget)

    async def _allowed_sources(
        self, conn: AsyncConnection, *, exposure: Exposure | None, sources: Sequence[str] | None
    ) -> list[int] | None:
        """Ids of the sources to search, or None when that is every source (no filter needed)."""
        cursor = await conn.execute("SELECT id, name, exposure FROM sources")
        rows = await cursor.fetchall()
        allowed = [
            source_id
            for source_id, name, source_exposure in rows
            if source_exposure != "off"
            and (exposure is None or source_exposure == exposure)
            and (sources is None or name in sources)
        ]
        return None if len(allowed) == len(rows) else allowed

    async def _vector_ranking(
        self, conn: AsyncConnection, vector: Sequence[float], *, k: int, source_ids: list[int] | None
    ) -> list[int]:
        assert self.embedder is not None
        dimension = len(vector)
        # SET LOCAL takes no parameters; the value is an int we control.
        await conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(int(self.ef_search))))
        if source_ids is not None:
            # Filtering after the index scan could leave fewer than k rows; let the scan continue.
            await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        statement = vector_statement(self.embedder.name, dimension, filtered=source_ids is not None)
        cursor = await conn.execute(statement, {"v": Vector(list(vector)), "k": k, "ids": source_ids})
        rows = await cursor.fetchall()
        # relaxed_order may return rows slightly out of order.
        return [chunk_id for chunk_id, _ in sorted(rows, key=lambda row: (row[1], row[0]))]

    async def _fulltext_ranking(
        self, conn: AsyncConnection, query: str, *, k: int, source_ids: list[int] | None
    ) -> list[int]:
        cursor = await conn.execute(
            fulltext_statement(filtered=source_ids is not None), {"q": query, "n": self.fulltext_candidates, "k": k, "ids": source_ids}
        )
        return [row[0] for row in await cursor.fetchall()]

    async def _hits(self, conn: AsyncConnection, fused: list[tuple[int, float]]) -> list[ChunkHit]:
        if not fused:
            return []
        cursor = await conn.execute(
            "SELECT c.id, c.text, d.title, c.heading_path, d.uri, s.name, c.token_count "
            "FROM chunks c JOIN documents d ON d.id = c.document_id JOIN sources s ON s.id = c.source_id "
            "WHERE c.id = ANY(%s)",
            ([chunk_id for chunk_id, _ in fused],),
        )
        rows = {row[0]: row for row in await cursor.fetchall()}
        hits = []
        for chunk_id, score in fused:
            row = rows.get(chunk_id)
            if row is None:
                continue  # replaced by a concurrent ingest between the ranking and this read
            hits.append(
                ChunkHit(
                    chunk_id=chunk_id,
                    score=score,
                    text=row[1],
                    title=row[2],
                    heading_path=tuple(row[3] or ()),
                    uri=row[4],
                    source=row[5],
                    token_count=row[6],
                )
            )
        return hits
