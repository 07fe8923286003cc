"""Retrieval benchmark: 100,000 chunks in a fresh embedded Postgres; prints latency, recall, build and ingest figures.

Run by hand: `.venv/bin/python bench/retrieval.py` (a few minutes on 2 cores). Figures, not a test.

Text is drawn from a Zipf-distributed synthetic vocabulary, so a few words occur in most chunks
and most words in very few, as in real prose. Embeddings are clustered the way real ones are
(cluster centres plus noise, normalised): uniformly random vectors have no near neighbours and
make HNSW recall meaningless. Ingestion throughput goes through the real ingest path with the
real local model. Source scoping: the chunks are spread over 20 restricted sources, and the hybrid
figures are repeated for a channel granted 1% of them and one granted about half, with recall@10
against exact search over the granted chunks only.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import psycopg
from pgvector import Vector
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from core.retrieval.retriever import SourceScope  # noqa: E402
from core.retrieval.search import EF_SEARCH, PgRetriever, vector_statement  # noqa: E402
from core.retrieval.store import HNSW_EF_CONSTRUCTION, HNSW_M, ensure_vector_index  # noqa: E402
from core.store.db import Database  # noqa: E402

CHUNKS = 100_000
CHUNKS_PER_DOCUMENT = 10
WORDS_PER_CHUNK = 110
VOCABULARY = 30_000
ZIPF_EXPONENT = 1.07
DIMENSION = 384
CLUSTERS = 200
# Noise of norm about 1 around a unit centre: a chunk's cosine to its centre is about 0.7 and to a
# chunk of the same cluster about 0.5, much like sentence embeddings of one topic.
CLUSTER_NOISE = 1.0
MODEL = "bench:clustered-384"
QUERIES = 100
WARMUP_QUERIES = 10
RESULTS = 6  # the bot's default RETRIEVAL_CHUNKS
TOKEN_BUDGET = 2000  # the bot's default RETRIEVAL_DOC_TOKENS
RECALL_AT = 10
EF_SWEEP = (40, 64, 100, 150)
SELECTIVE_MAX_SHARE = 0.01
UNSELECTIVE_MIN_SHARE = 0.5
INGEST_SAMPLE_CHUNKS = 500
# Source scoping: the chunks spread over SOURCES restricted sources; one channel is granted the first
# (1% of the chunks), another the first BIG_GRANT (about half). Unscoped figures search every source.
SOURCES = 20
SMALL_SHARE = 0.01
BIG_GRANT = 10
SMALL_CHANNEL = "bench:T:small"
BIG_CHANNEL = "bench:T:big"
EVERY_SOURCE = SourceScope(every_restricted=True)
INDEX_BUILD_MEMORY = "1GB"
SEED = 7

_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


class _FixedModel:
    """Stands in for the embedder at query time: the bench passes its own query vectors."""

    name = MODEL
    dimension = DIMENSION

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise RuntimeError("the bench passes query vectors itself")


def make_vocabulary(rng: np.random.Generator) -> list[str]:
    words: set[str] = set()
    while len(words) < VOCABULARY:
        count = int(rng.integers(2, 5))
        words.add("".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), count)))
    return sorted(words, key=lambda w: (len(w), w))


def zipf_word_ids(rng: np.random.Generator, size: int) -> np.ndarray:
    ranks = np.arange(1, VOCABULARY + 1, dtype=np.float64)
    weights = ranks**-ZIPF_EXPONENT
    return rng.choice(VOCABULARY, size=size, p=weights / weights.sum())


def clustered_vectors(rng: np.random.Generator, count: int, centres: np.ndarray) -> np.ndarray:
    labels = rng.integers(0, len(centres), count)
    noise = rng.standard_normal((count, DIMENSION)).astype(np.float32) * (CLUSTER_NOISE / np.sqrt(DIMENSION))
    vectors = centres[labels] + noise
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def source_of_document(doc: int) -> int:
    """Source 1 holds the first 1% of the documents; the rest are dealt round the other sources."""
    documents = CHUNKS // CHUNKS_PER_DOCUMENT
    if doc <= int(documents * SMALL_SHARE):
        return 1
    return 2 + doc % (SOURCES - 1)


def source_of_chunk(index: int) -> int:
    return source_of_document(index // CHUNKS_PER_DOCUMENT + 1)


async def load(db: Database, texts: list[str], vectors: np.ndarray) -> tuple[float, float, float]:
    """COPY documents, chunks and embeddings in; returns seconds for chunk COPY, GIN build, vector COPY."""
    documents = CHUNKS // CHUNKS_PER_DOCUMENT
    async with db.connection() as conn:
        for source in range(1, SOURCES + 1):
            await conn.execute(
                "INSERT INTO sources (id, name, exposure, restricted) VALUES (%s, %s, 'prefetch', true)",
                (source, f"bench{source}"),
            )
            audiences = [BIG_CHANNEL] + ([SMALL_CHANNEL] if source == 1 else [])
            for audience in audiences if source <= BIG_GRANT else []:
                await conn.execute(
                    "INSERT INTO source_grants (source_id, audience, granted_by) VALUES (%s, %s, 'bench')",
                    (source, audience),
                )
        async with conn.cursor().copy("COPY documents (id, source_id, uri, title, content_hash) FROM STDIN") as copy:
            for doc in range(1, documents + 1):
                await copy.write_row((doc, source_of_document(doc), f"bench://doc/{doc}", f"Document {doc}", f"hash{doc}"))
        # Building the GIN index once after the load is much faster than maintaining it row by row.
        await conn.execute("DROP INDEX chunks_tsv_idx")
    started = time.perf_counter()
    async with db.connection() as conn:
        async with conn.cursor().copy(
            "COPY chunks (id, document_id, source_id, ord, text, heading_path, title, token_count) FROM STDIN"
        ) as copy:
            for index, text in enumerate(texts):
                doc = index // CHUNKS_PER_DOCUMENT + 1
                ord_ = index % CHUNKS_PER_DOCUMENT
                await copy.write_row(
                    (index + 1, doc, source_of_document(doc), ord_, text, [f"Part {ord_}"], f"Document {doc}", 180)
                )
    copy_chunks_s = time.perf_counter() - started
    started = time.perf_counter()
    async with db.connection() as conn:
        await conn.execute(f"SET LOCAL maintenance_work_mem = '{INDEX_BUILD_MEMORY}'")
        await conn.execute("CREATE INDEX chunks_tsv_idx ON chunks USING gin (tsv)")
    gin_s = time.perf_counter() - started
    started = time.perf_counter()
    async with db.connection() as conn:
        async with conn.cursor().copy(
            "COPY chunk_embeddings (chunk_id, model, source_id, embedding) FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int8", "text", "int8", "vector"])
            for index in range(len(texts)):
                await copy.write_row((index + 1, MODEL, source_of_chunk(index), Vector(vectors[index])))
        await conn.execute("SELECT setval('chunks_id_seq', %s)", (len(texts),))
        await conn.execute("SELECT setval('documents_id_seq', %s)", (documents,))
        await conn.execute("SELECT setval('sources_id_seq', %s)", (SOURCES,))
    copy_vectors_s = time.perf_counter() - started
    return copy_chunks_s, gin_s, copy_vectors_s


async def vacuum(db: Database) -> float:
    """VACUUM ANALYZE once, as autovacuum would soon after a bulk load, so it does not run during the figures."""
    started = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(db.url or "", autocommit=True) as conn:
        await conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def pick_terms(word_ids: np.ndarray, vocabulary: list[str]) -> tuple[list[str], list[str]]:
    """Words by the share of chunks they occur in: under 1% (but present), and over 50%."""
    per_chunk = word_ids.reshape(CHUNKS, WORDS_PER_CHUNK)
    present = np.zeros(VOCABULARY, dtype=np.int64)
    for row in per_chunk:
        present[np.unique(row)] += 1
    share = present / CHUNKS
    selective = [vocabulary[i] for i in np.flatnonzero((share > 0.001) & (share < SELECTIVE_MAX_SHARE))]
    unselective = [vocabulary[i] for i in np.flatnonzero(share > UNSELECTIVE_MIN_SHARE)]
    return selective, unselective


async def latency(
    retriever: PgRetriever, queries: list[tuple[str, np.ndarray]], scope: SourceScope = EVERY_SOURCE
) -> tuple[float, float, float, float]:
    """Hybrid p50/p95 and full-text-only p50/p95, in ms, searching the sources `scope` may see."""
    for text, vector in queries[:WARMUP_QUERIES]:
        await retriever.search_chunks(
            text, limit=RESULTS, token_budget=TOKEN_BUDGET, query_vector=list(vector), scope=scope
        )
    hybrid: list[float] = []
    words: list[float] = []
    lexical = PgRetriever(retriever.db, None)
    for text, vector in queries:
        started = time.perf_counter()
        hits = await retriever.search_chunks(
            text, limit=RESULTS, token_budget=TOKEN_BUDGET, exposure="prefetch", query_vector=list(vector), scope=scope
        )
        hybrid.append((time.perf_counter() - started) * 1000)
        assert hits, f"no hits for {text!r}"
        started = time.perf_counter()
        await lexical.search_chunks(text, limit=RESULTS, token_budget=TOKEN_BUDGET, exposure="prefetch", scope=scope)
        words.append((time.perf_counter() - started) * 1000)
    return (
        statistics.median(hybrid),
        percentile(hybrid, 0.95),
        statistics.median(words),
        percentile(words, 0.95),
    )


async def recall(db: Database, vectors: np.ndarray, queries: np.ndarray, ef_search: int) -> float:
    """recall@10 of the HNSW path (the bot's statement and settings) against exact search in numpy."""
    exact = np.argsort(-(queries @ vectors.T), axis=1)[:, :RECALL_AT] + 1  # chunk ids start at 1
    statement = vector_statement(MODEL, DIMENSION, filtered=False)
    found = 0
    async with db.connection() as conn:
        await conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef_search)))
        for query, truth in zip(queries, exact):
            cursor = await conn.execute(statement, {"v": Vector(query), "k": RECALL_AT, "ids": None})
            found += len({row[0] for row in await cursor.fetchall()} & set(truth.tolist()))
    return found / (len(queries) * RECALL_AT)


async def scoped_recall(retriever: PgRetriever, vectors: np.ndarray, queries: np.ndarray, granted: int) -> float:
    """recall@10 of the bot's vector branch (exact for a small scope, else the HNSW iterative scan) for a
    channel granted the first `granted` sources, against exact search over those sources' chunks only."""
    sources = np.array([source_of_chunk(i) for i in range(len(vectors))])
    allowed = np.flatnonzero(sources <= granted)
    scores = queries @ vectors[allowed].T
    exact = allowed[np.argsort(-scores, axis=1)[:, :RECALL_AT]] + 1
    found = 0
    for query, truth in zip(queries, exact):
        ranked = await retriever.nearest_chunks(list(query), k=RECALL_AT, source_ids=list(range(1, granted + 1)))
        found += len(set(ranked) & set(truth.tolist()))
    return found / (len(queries) * RECALL_AT)


async def pgvector_version(db: Database) -> str:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = await cursor.fetchone()
    return str(row[0]) if row else "none"


async def ingest_throughput(db: Database, rng: np.random.Generator, vocabulary: list[str], root: Path) -> str:
    from core.retrieval.embeddings import LocalEmbeddings
    from core.retrieval.ingest import IngestRequest, ingest

    folder = root / "sample"
    folder.mkdir()
    # Sections of ~110 words each become one chunk apiece; 10 per file.
    sections_per_file = 10
    for file_index in range(INGEST_SAMPLE_CHUNKS // sections_per_file):
        parts = [f"# Sample {file_index}"]
        for section in range(sections_per_file):
            words = " ".join(vocabulary[i] for i in zipf_word_ids(rng, WORDS_PER_CHUNK))
            parts.append(f"## Section {section}\n\n{words}.")
        (folder / f"sample{file_index:03}.md").write_text("\n\n".join(parts))
    embedder = LocalEmbeddings()
    started = time.perf_counter()
    await embedder.embed(["warm up"])
    load_s = time.perf_counter() - started
    sample = [
        "Sample › Section\n\n" + " ".join(vocabulary[i] for i in zipf_word_ids(rng, WORDS_PER_CHUNK)) + "."
        for _ in range(64)
    ]
    started = time.perf_counter()
    await embedder.embed(sample)
    model_rate = len(sample) / (time.perf_counter() - started)
    started = time.perf_counter()
    summary = await ingest(
        db, IngestRequest(source="sample", exposure="prefetch", targets=[str(folder)]),
        embedder=embedder,
    )
    elapsed = time.perf_counter() - started
    return (
        f"{summary.chunks / elapsed:.0f} chunks/s ({summary.chunks} chunks in {summary.added} files, "
        f"{elapsed:.1f} s, {embedder.name}; model load {load_s:.1f} s not counted; "
        f"the model alone embeds {model_rate:.0f} such chunks/s)"
    )


async def main() -> None:
    total_started = time.perf_counter()
    rng = np.random.default_rng(SEED)
    root = Path(tempfile.mkdtemp(prefix="relaybot-bench-"))
    root.chmod(0o755)  # the embedded server runs as its own user when this runs as root
    db = Database(url=None, data_dir=root)
    try:
        started = time.perf_counter()
        vocabulary = make_vocabulary(rng)
        word_ids = zipf_word_ids(rng, CHUNKS * WORDS_PER_CHUNK)
        texts = [
            " ".join(vocabulary[i] for i in row) + "."
            for row in word_ids.reshape(CHUNKS, WORDS_PER_CHUNK)
        ]
        centres = rng.standard_normal((CLUSTERS, DIMENSION)).astype(np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        vectors = clustered_vectors(rng, CHUNKS, centres)
        selective, unselective = pick_terms(word_ids, vocabulary)
        print(f"generated {CHUNKS:,} chunks of {WORDS_PER_CHUNK} words in {time.perf_counter() - started:.1f} s")

        await db.open()
        copy_chunks_s, gin_s, copy_vectors_s = await load(db, texts, vectors)
        print(f"COPY chunks (tsvector generated on insert): {copy_chunks_s:.1f} s = {CHUNKS / copy_chunks_s:,.0f} chunks/s")
        print(f"COPY embeddings (binary): {copy_vectors_s:.1f} s")
        print(f"index build: GIN full-text {gin_s:.1f} s", end="", flush=True)
        started = time.perf_counter()
        await ensure_vector_index(db, model=MODEL, dimension=DIMENSION, build_memory=INDEX_BUILD_MEMORY)
        print(f", HNSW (m={HNSW_M}, ef_construction={HNSW_EF_CONSTRUCTION}, {DIMENSION}-d cosine) {time.perf_counter() - started:.1f} s")

        print(f"VACUUM ANALYZE after the load: {await vacuum(db):.1f} s")

        retriever = PgRetriever(db, _FixedModel())
        query_vectors = clustered_vectors(rng, QUERIES + WARMUP_QUERIES, centres)
        picks = rng.integers(0, 1 << 30, (QUERIES + WARMUP_QUERIES, 2))
        for label, terms in (("selective (<1% of chunks)", selective), ("unselective (>50%)", unselective)):
            queries = [
                (f"{terms[a % len(terms)]} {terms[b % len(terms)]}", query_vectors[i]) for i, (a, b) in enumerate(picks)
            ]
            p50, p95, w50, w95 = await latency(retriever, queries)
            print(
                f"hybrid latency, {label}, {len(terms)} candidate terms: p50 {p50:.1f} ms, p95 {p95:.1f} ms "
                f"(full-text branch alone: p50 {w50:.1f} ms, p95 {w95:.1f} ms)"
            )
        print(f"source scoping: {SOURCES} restricted sources, pgvector {await pgvector_version(db)}")
        for channel, granted, share in ((SMALL_CHANNEL, 1, SMALL_SHARE), (BIG_CHANNEL, BIG_GRANT, None)):
            scope = SourceScope(audiences=(channel,))
            chunks = sum(1 for i in range(CHUNKS) if source_of_chunk(i) <= granted)
            for label, terms in (("selective", selective), ("unselective", unselective)):
                queries = [
                    (f"{terms[a % len(terms)]} {terms[b % len(terms)]}", query_vectors[i])
                    for i, (a, b) in enumerate(picks)
                ]
                p50, p95, w50, w95 = await latency(retriever, queries, scope)
                print(
                    f"scoped hybrid latency, channel granted {chunks / CHUNKS:.1%} of the chunks, {label} terms: "
                    f"p50 {p50:.1f} ms, p95 {p95:.1f} ms (full-text branch alone: p50 {w50:.1f} ms, p95 {w95:.1f} ms)"
                )
            value = await scoped_recall(retriever, vectors, query_vectors[:QUERIES], granted)
            print(f"scoped recall@{RECALL_AT} vs exact filtered search, channel granted {chunks / CHUNKS:.1%}: {value:.3f}")
        for ef in EF_SWEEP:
            marker = "  <- the bot's EF_SEARCH" if ef == EF_SEARCH else ""
            value = await recall(db, vectors, query_vectors[:QUERIES], ef)
            print(f"recall@{RECALL_AT} vs exact, ef_search={ef}: {value:.3f}{marker}")
        if EF_SEARCH not in EF_SWEEP:
            print(f"recall@{RECALL_AT} vs exact, ef_search={EF_SEARCH} (the bot's): "
                  f"{await recall(db, vectors, query_vectors[:QUERIES], EF_SEARCH):.3f}")
        print("ingestion throughput:", await ingest_throughput(db, rng, vocabulary, root))
    finally:
        await db.close()
        shutil.rmtree(root, ignore_errors=True)
    print(f"total {time.perf_counter() - total_started:.0f} s")


if __name__ == "__main__":
    asyncio.run(main())
