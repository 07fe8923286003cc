"""Hybrid search: pgvector cosine (HNSW) and Postgres full text, fused by reciprocal rank."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pgvector import Vector
from psycopg import AsyncConnection, sql

from core.events import SourceItem
from core.learning.visibility import ChannelVisibility
from core.learning.visibility_sources import ScopedSource, apply_rule, candidates, needs_rule, source_rows
from core.retrieval.chunking import HEADING_PATH_SEPARATOR
from core.retrieval.embeddings import EmbeddingError, EmbeddingProvider
from core.retrieval.links import web_uri
from core.retrieval.store import vector_expression, vector_predicate
from core.retrieval.retriever import OPEN_SOURCES, Exposure, SourceScope
from core.store.db import Database
from core.text_safety import storable

log = logging.getLogger(__name__)

# How long "no vectors yet" is believed before asking again (an ingest may add some meanwhile).
NO_VECTORS_RECHECK_S = 30.0
SEARCH_QUERY_MAX_CHARS = 2000

RRF_K = 60
# Each branch contributes this many candidates per requested result (at least CANDIDATES_MIN).
CANDIDATES_PER_RESULT = 4
CANDIDATES_MIN = 20
# HNSW search breadth. With the graph built at ef_construction 128 (core/retrieval/store.py): recall@10 1.000 at
# 100 and 150 on bench/retrieval.py's 100k clustered 384-d vectors, 0.997 at 150 on bench/conversations.py's 200k
# filtered to half (the margin for a filter that removes the query's nearest neighbours). Never below the rows
# asked for, or the scan returns fewer.
EF_SEARCH = 150
# The full-text branch ranks at most this many matches per tier: ranking every match of a common
# word costs 80-130 ms on 100k chunks, ranking a bounded set a few ms.
FULLTEXT_RANK_CANDIDATES = 300
# A search scoped to sources holding at most this many vectors reads them all (exact, ~1 ms per 1000 on
# bench/retrieval.py's 384-d vectors) instead of walking the HNSW graph for a few matches: a channel
# granted 1% of 100k chunks got recall@10 0.88 and p95 48 ms through the graph.
EXACT_SCAN_MAX_ROWS = 10_000
TS_CONFIG = "english"

# ts_rank_cd normalisation: 1 divides by 1 + log(chunk length) so long chunks do not win by size,
# 32 maps rank to rank/(rank+1) so scores stay between 0 and 1.
TS_RANK_NORMALISATION = 1 | 32

# websearch_to_tsquery syntax a user writes on purpose: "a phrase", -excluded, either or other.
_SEARCH_SYNTAX_RE = re.compile(r'"|(?:^|\s)-\w|\s(?i:or)\s')

_PARSE_SQL = (
    "SELECT websearch_to_tsquery(%(config)s::regconfig, %(q)s)::text,"
    " replace(plainto_tsquery(%(config)s::regconfig, %(q)s)::text, ' & ', ' | ')"
)


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


def exact_vector_statement(model: str, dimension: int) -> sql.Composed:
    """Nearest chunks of some sources by reading all their vectors (through the source_id index), never the
    HNSW index: the distances are worked out in a materialised step, so the planner cannot order by the index."""
    return sql.SQL(
        "WITH candidates AS MATERIALIZED (SELECT chunk_id, {expr} <=> %(v)s::vector({dim}) AS distance "
        "FROM chunk_embeddings WHERE source_id = ANY(%(ids)s) AND {pred}) "
        "SELECT chunk_id, distance FROM candidates ORDER BY distance, chunk_id LIMIT %(k)s"
    ).format(expr=vector_expression(dimension), dim=sql.Literal(dimension), pred=vector_predicate(model, dimension))


def fulltext_statement(tsquery: str, *, filtered: bool) -> sql.Composed:
    """The first n matches of tsquery found through the GIN index, ranked by ts_rank_cd; best k.

    The tsquery is a literal, not a parameter: the planner then sees how common its words are and
    picks a bitmap scan for rare words or a plain scan that stops after n rows for common ones
    (building the bitmap of a word in most chunks alone costs ~10 ms on 100k chunks).
    """
    return sql.SQL(
        "SELECT id, ts_rank_cd(tsv, {q}::tsquery, {norm}) AS score FROM ("
        " SELECT c.id, c.tsv FROM chunks c WHERE c.tsv @@ {q}::tsquery{filter} LIMIT %(n)s"
        ") AS candidates ORDER BY score DESC, id LIMIT %(k)s"
    ).format(
        q=sql.Literal(tsquery),
        norm=sql.Literal(TS_RANK_NORMALISATION),
        filter=sql.SQL(" AND c.source_id = ANY(%(ids)s)") if filtered else sql.SQL(""),
    )


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
        exact_scan_max_rows: int = EXACT_SCAN_MAX_ROWS,
        visibility: ChannelVisibility | None = None,
    ) -> None:
        self.db = db
        # The rule for learned channels' passages; without one, none is ever returned to a conversation.
        self.visibility = visibility
        self.exact_scan_max_rows = exact_scan_max_rows
        self.embedder = embedder
        self.ef_search = ef_search
        self.fulltext_candidates = fulltext_candidates
        self._iterative_scan: bool | None = None
        self._vectors_seen = False
        self._no_vectors_until = 0.0

    async def has_sources(self, exposure: Exposure, *, scope: SourceScope | None = None) -> bool:
        scope = scope or OPEN_SOURCES
        async with self.db.connection() as conn:
            rows = candidates(await source_rows(conn, scope, with_documents=True), scope, exposure=exposure, sources=None)
        # The same rule as search's, so internal_search is offered only where a search could find something.
        rows = [row for row in rows if row.has_documents]
        if needs_rule(rows, scope):
            rows = await apply_rule(rows, scope, self.visibility)
        return bool(rows)

    async def search(
        self,
        query: str,
        *,
        limit: int,
        token_budget: int | None = None,
        exposure: Exposure | None = None,
        sources: Sequence[str] | None = None,
        scope: SourceScope | None = None,
    ) -> list[SourceItem]:
        hits = await self.search_chunks(
            query, limit=limit, token_budget=token_budget, exposure=exposure, sources=sources, scope=scope
        )
        return [hit.as_source_item() for hit in hits]

    async def has_vectors(self) -> bool:
        """Whether any chunk is embedded by this embedder's model; until one is, queries are not embedded,
        so a bot with no (embedded) sources never loads an embedding model for a question."""
        if self.embedder is None:
            return False
        if self._vectors_seen:
            return True
        if time.monotonic() < self._no_vectors_until:
            return False
        async with self.db.connection() as conn:
            cursor = await conn.execute(
                "SELECT EXISTS (SELECT 1 FROM chunk_embeddings WHERE model = %s)", (self.embedder.name,)
            )
            row = await cursor.fetchone()
        self._vectors_seen = bool(row and row[0])
        if not self._vectors_seen:
            self._no_vectors_until = time.monotonic() + NO_VECTORS_RECHECK_S
        return self._vectors_seen

    async def warm_up(self) -> None:
        """At startup: load the embedding model in the background only when stored vectors need it."""
        warm = getattr(self.embedder, "warm_up", None)
        if warm is not None and await self.has_vectors():
            await warm()

    async def embed_query(self, query: str) -> list[float] | None:
        if self.embedder is None or not await self.has_vectors():
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
        scope: SourceScope | None = None,
        query_vector: Sequence[float] | None = None,
    ) -> list[ChunkHit]:
        """Ranked chunks from the sources `scope` may see (None: open ones only); query_vector skips
        embedding the query (the bench passes its own)."""
        if limit <= 0 or not query.strip() or (token_budget is not None and token_budget <= 0):
            return []
        # A question with a pasted file can be 100 KB; Postgres's text-search parser overflows its stack
        # on that, and the start of a question says what it is about anyway.
        # The query is the asker's words or the model's (internal_search): storable is what Postgres can take.
        query = storable(query[:SEARCH_QUERY_MAX_CHARS])
        if query_vector is None:
            query_vector = await self.embed_query(query)
        # Some hits are passed over by the token budget; fetch enough to still fill the limit.
        k = max(CANDIDATES_MIN, limit * CANDIDATES_PER_RESULT)
        scope = scope or OPEN_SOURCES
        async with self.db.connection() as conn:
            rows = await source_rows(conn, scope)
            allowed = candidates(rows, scope, exposure=exposure, sources=sources)
            if not needs_rule(allowed, scope):
                hits = await self._ranked(conn, query, query_vector, k=k, source_ids=_filter(allowed, rows))
                return fit_budget(hits, limit=limit, token_budget=token_budget)
        # A learned channel is among them: the rule may ask the platform (its facts are cached), so no
        # connection is held meanwhile; a bot that learns from no channel never gets here.
        allowed = await apply_rule(allowed, scope, self.visibility)
        async with self.db.connection() as conn:
            hits = await self._ranked(conn, query, query_vector, k=k, source_ids=_filter(allowed, rows))
        return fit_budget(hits, limit=limit, token_budget=token_budget)

    async def _ranked(
        self, conn: AsyncConnection, query: str, query_vector: Sequence[float] | None, *, k: int,
        source_ids: list[int] | None,
    ) -> list[ChunkHit]:
        """Both branches fused, filtered by source_ids inside their index scans (HNSW with pgvector's iterative
        scan, so a channel granted 1% of the chunks still gets k rows): a passage the scope may not see is never
        ranked, let alone returned (nor another team's source anywhere outside that team)."""
        if source_ids is not None and not source_ids:
            return []
        rankings = []
        if query_vector is not None and self.embedder is not None:
            rankings.append(await self._vector_ranking(conn, query_vector, k=k, source_ids=source_ids))
        rankings.append(await self._fulltext_ranking(conn, query, k=k, source_ids=source_ids))
        return await self._hits(conn, reciprocal_rank_fusion(rankings))

    async def nearest_chunks(self, vector: Sequence[float], *, k: int, source_ids: list[int] | None) -> list[int]:
        """The vector branch alone: the k nearest chunk ids as search ranks them (the bench measures its recall)."""
        async with self.db.connection() as conn:
            return await self._vector_ranking(conn, vector, k=k, source_ids=source_ids)

    async def _vector_ranking(
        self, conn: AsyncConnection, vector: Sequence[float], *, k: int, source_ids: list[int] | None
    ) -> list[int]:
        assert self.embedder is not None
        dimension = len(vector)
        if source_ids is not None and await self._few_vectors(conn, source_ids):
            # A scope holding few chunks (a channel granted a small source) is searched exactly: the HNSW
            # graph would be walked far for few matches, slower and with worse recall than reading them all.
            statement = exact_vector_statement(self.embedder.name, dimension)
            cursor = await conn.execute(statement, {"v": Vector(list(vector)), "k": k, "ids": source_ids})
            return [chunk_id for chunk_id, _ in await cursor.fetchall()]
        # SET LOCAL takes no parameters; the value is an int we control.
        ef_search = max(int(self.ef_search), k)
        await conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef_search)))
        if source_ids is not None and await self._has_iterative_scan(conn):
            # Filtering after the index scan could leave fewer than k rows; let the scan continue.
            await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        statement = vector_statement(self.embedder.name, dimension, filtered=source_ids is not None)
        cursor = await conn.execute(statement, {"v": Vector(list(vector)), "k": k, "ids": source_ids})
        rows = await cursor.fetchall()
        # relaxed_order may return rows slightly out of order.
        return [chunk_id for chunk_id, _ in sorted(rows, key=lambda row: (row[1], row[0]))]

    async def _few_vectors(self, conn: AsyncConnection, source_ids: list[int]) -> bool:
        """Whether the scope's sources hold at most exact_scan_max_rows vectors of this model (counted
        through the (source_id, model) index, stopping one past the limit)."""
        assert self.embedder is not None
        cursor = await conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM chunk_embeddings WHERE source_id = ANY(%s) AND model = %s LIMIT %s) AS few",
            (source_ids, self.embedder.name, self.exact_scan_max_rows + 1),
        )
        row = await cursor.fetchone()
        return bool(row) and int(row[0]) <= self.exact_scan_max_rows

    async def _has_iterative_scan(self, conn: AsyncConnection) -> bool:
        """pgvector 0.8 added iterative index scans; an older server (via DATABASE_URL) rejects the setting."""
        if self._iterative_scan is None:
            cursor = await conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            row = await cursor.fetchone()
            version = tuple(int(part) for part in str(row[0]).split(".")[:2] if part.isdigit()) if row else ()
            self._iterative_scan = version >= (0, 8)
        return self._iterative_scan

    async def _fulltext_ranking(
        self, conn: AsyncConnection, query: str, *, k: int, source_ids: list[int] | None
    ) -> list[int]:
        """Chunks with every word first (websearch syntax: quotes, -word, or), then chunks with any word."""
        cursor = await conn.execute(_PARSE_SQL, {"config": TS_CONFIG, "q": query})
        parsed = await cursor.fetchone()
        assert parsed is not None
        tiers = dict.fromkeys(parsed)  # the two are equal for a one-word query
        if _SEARCH_SYNTAX_RE.search(query):
            tiers = dict.fromkeys(parsed[:1])  # quotes, -word or "or" were meant: no any-word tier
        ranking: list[int] = []
        for tsquery in tiers:
            if len(ranking) >= k:
                break  # the all-words tier filled the list; any-word matches rank below every one
            if not tsquery:
                continue  # only stop words
            cursor = await conn.execute(
                fulltext_statement(tsquery, filtered=source_ids is not None),
                {"n": self.fulltext_candidates, "k": k, "ids": source_ids},
            )
            ranking.extend(row[0] for row in await cursor.fetchall() if row[0] not in ranking)
        return ranking[:k]

    async def _hits(self, conn: AsyncConnection, fused: list[tuple[int, float]]) -> list[ChunkHit]:
        if not fused:
            return []
        cursor = await conn.execute(
            "SELECT c.id, c.text, d.title, c.heading_path, d.uri, s.name, c.token_count, s.link_base, s.link_root "
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
                    # Mapped on every read, so a link base set after ingest applies without re-ingesting.
                    uri=web_uri(row[4], link_base=row[7], root=row[8]),
                    source=row[5],
                    token_count=row[6],
                )
            )
        return hits



def _filter(allowed: Sequence[ScopedSource], rows: Sequence[ScopedSource]) -> list[int] | None:
    """Ids of the sources to search, or None when that is every source (no filter needed)."""
    return None if len(allowed) == len(rows) else [row.id for row in allowed]
