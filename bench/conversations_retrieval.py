"""bench/conversations.py's retrieval part: 100k message chunks over 300 learned channels plus 100k document chunks,
searched with the visibility rule on; hybrid p95 per audience and query mix, and recall@10 vs exact filtered search.

The data is bench/retrieval.py's (a Zipf vocabulary, clustered 384-d vectors), with one difference that makes the
filter matter: each channel talks about its own few topics (its chunks' vectors come from 3 of the 200 cluster
centres), so the chunks an asker may not read crowd round the query in the HNSW graph, as real channels' would.
The documents are open (the deployment's), the channels the team's, restricted, seen through the rule:
- a DM whose asker reads few channels (selective), and one whose asker reads most (unselective): one readable_by;
- a channel without guests: its own plus the public channels (one place read per learned channel, cached).
The facts answer from memory, as a platform's cached facts do once warm; what is measured is the engine's cost.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pgvector import Vector

from bench.retrieval import (
    CLUSTER_NOISE,
    CLUSTERS,
    DIMENSION,
    MODEL,
    RECALL_AT,
    RESULTS,
    TOKEN_BUDGET,
    WORDS_PER_CHUNK,
    _FixedModel,
    clustered_vectors,
    make_vocabulary,
    percentile,
    vacuum,
    zipf_word_ids,
)
from core.learning.model import Audience, Place
from core.learning.visibility import ChannelVisibility
from core.learning.visibility_sources import apply_rule, candidates, source_rows
from core.retrieval.retriever import SourceScope
from core.retrieval.search import EF_SEARCH, PgRetriever
from core.retrieval.store import ensure_vector_index
from core.store.db import Database

MESSAGE_CHUNKS = 100_000
DOCUMENT_CHUNKS = 100_000
CHANNELS = 300
TOPICS_PER_CHANNEL = 3
CHUNKS_PER_THREAD = 5
DOCUMENT_SOURCES = 20
CHUNKS_PER_DOCUMENT = 10
FEW_CHANNELS = 6  # the selective asker reads these (2% of the message chunks)
MOST_CHANNELS = 240  # the unselective asker reads these (80%)
PUBLIC_SHARE = 0.5  # of the channels: public, so a channel without guests sees them
QUERIES = 100
WARMUP_QUERIES = 10
TEAM = "TB"
P95_TARGET_MS = 30.0
RECALL_TARGET = 0.95
INDEX_BUILD_MEMORY = "1GB"
# Printed beside the bot's EF_SEARCH: how much of the recall the HNSW graph itself gives up at this size.
WIDER_EF_SEARCH = 400
RULE_SAMPLES = 50
SEED = 24


@dataclass(frozen=True, kw_only=True)
class Corpus:
    """What was loaded: chunk i (id i + 1) belongs to source sources[i]; vectors[i] is its embedding."""

    vectors: np.ndarray
    centres: np.ndarray
    sources: np.ndarray
    channel_ids: dict[int, str]  # source id → channel id, for the learned channels
    public: frozenset[str]
    selective_terms: list[str]
    unselective_terms: list[str]


class BenchFacts:
    """ChannelFacts answered from memory: who reads which channel, and which channels are public."""

    def __init__(self, readers: dict[str, frozenset[str]], public: frozenset[str]) -> None:
        self.readers = readers
        self.public = public
        self.readable_calls = 0

    async def place(self, workspace: str, channel: str) -> Place:
        return Place(public=channel in self.public)

    async def readable_by(self, workspace: str, user: str, channels: Sequence[str]) -> frozenset[str]:
        self.readable_calls += 1
        return self.readers.get(user, frozenset()) & frozenset(channels)

    def forget(self, workspace: str, *, user: str = "", channel: str = "") -> None:
        pass


def channel_of(index: int) -> int:
    """The learned channel (0-based) of message chunk `index`: threads dealt round the channels."""
    return (index // CHUNKS_PER_THREAD) % CHANNELS


def topical_vectors(rng: np.random.Generator, labels: np.ndarray, centres: np.ndarray) -> np.ndarray:
    noise = rng.standard_normal((len(labels), DIMENSION)).astype(np.float32) * (CLUSTER_NOISE / np.sqrt(DIMENSION))
    vectors = centres[labels] + noise
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def term_mixes(word_ids: np.ndarray, vocabulary: list[str]) -> tuple[list[str], list[str]]:
    """bench/retrieval.py's two mixes: words in under 1% of the chunks (but present), and in over 50%."""
    per_chunk = word_ids.reshape(-1, WORDS_PER_CHUNK)
    present = np.zeros(len(vocabulary), dtype=np.int64)
    for row in per_chunk:
        present[np.unique(row)] += 1
    share = present / len(per_chunk)
    selective = [vocabulary[i] for i in np.flatnonzero((share > 0.001) & (share < 0.01))]
    return selective, [vocabulary[i] for i in np.flatnonzero(share > 0.5)]


async def load(db: Database, rng: np.random.Generator, scale: float) -> Corpus:
    messages, documents = int(MESSAGE_CHUNKS * scale), int(DOCUMENT_CHUNKS * scale)
    vocabulary = make_vocabulary(rng)
    word_ids = zipf_word_ids(rng, (messages + documents) * WORDS_PER_CHUNK)
    rows = word_ids.reshape(-1, WORDS_PER_CHUNK)
    texts = [" ".join(vocabulary[i] for i in row) + "." for row in rows]
    centres = rng.standard_normal((CLUSTERS, DIMENSION)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    topics = rng.integers(0, CLUSTERS, (CHANNELS, TOPICS_PER_CHANNEL))
    channel = np.array([channel_of(i) for i in range(messages)], dtype=np.int64)
    labels = np.concatenate([topics[channel, rng.integers(0, TOPICS_PER_CHANNEL, messages)],
                             rng.integers(0, CLUSTERS, documents)])
    vectors = topical_vectors(rng, labels, centres)
    # Sources 1..CHANNELS are the channels, the next DOCUMENT_SOURCES the deployment's documents.
    sources = np.concatenate([channel + 1, CHANNELS + 1 + (np.arange(documents) // CHUNKS_PER_DOCUMENT) % DOCUMENT_SOURCES])
    channel_ids = {s + 1: f"C{s:04}" for s in range(CHANNELS)}
    public = frozenset(c for c in channel_ids.values() if rng.random() < PUBLIC_SHARE)
    await _copy(db, texts, vectors, sources, channel_ids, public)
    selective, unselective = term_mixes(word_ids[: messages * WORDS_PER_CHUNK], vocabulary)
    return Corpus(vectors=vectors, centres=centres, sources=sources, channel_ids=channel_ids, public=public,
                  selective_terms=selective, unselective_terms=unselective)


def _documents(sources: np.ndarray) -> list[int]:
    """Each chunk's document (1-based): a thread of CHUNKS_PER_THREAD message chunks, or CHUNKS_PER_DOCUMENT."""
    document, previous, ord_, out = 0, -1, 0, []
    for source in sources.tolist():
        size = CHUNKS_PER_THREAD if source <= CHANNELS else CHUNKS_PER_DOCUMENT
        if source != previous or ord_ >= size:
            document, ord_ = document + 1, 0
        out.append(document)
        previous, ord_ = source, ord_ + 1
    return out


async def _copy(db: Database, texts: list[str], vectors: np.ndarray, sources: np.ndarray,
                channel_ids: dict[int, str], public: frozenset[str]) -> None:
    documents = _documents(sources)
    async with db.connection() as conn:
        for source in range(1, CHANNELS + DOCUMENT_SOURCES + 1):
            learned = source in channel_ids
            name = f"channel:slack:{TEAM}:{channel_ids[source]}" if learned else f"handbook{source}"
            await conn.execute(
                "INSERT INTO sources (id, name, kind, owner, restricted, exposure) VALUES (%s, %s, %s, %s, %s, 'prefetch')",
                (source, name, "channel" if learned else "files", f"slack:{TEAM}" if learned else "", learned))
            if learned:
                await conn.execute(
                    "INSERT INTO learned_channels (source_id, platform, workspace, channel, name, private, since_days,"
                    " state) VALUES (%s, 'slack', %s, %s, %s, %s, 90, 'live')",
                    (source, TEAM, channel_ids[source], channel_ids[source].lower(), channel_ids[source] not in public))
        async with conn.cursor().copy("COPY documents (id, source_id, uri, title, content_hash) FROM STDIN") as copy:
            seen: set[int] = set()
            for document, source in zip(documents, sources.tolist()):
                if document not in seen:
                    seen.add(document)
                    await copy.write_row((document, source, f"bench://doc/{document}", f"Thread {document}", "h"))
        await conn.execute("DROP INDEX chunks_tsv_idx")
    async with db.connection() as conn:
        async with conn.cursor().copy(
            "COPY chunks (id, document_id, source_id, ord, text, title, token_count) FROM STDIN"
        ) as copy:
            for index, (text, document, source) in enumerate(zip(texts, documents, sources.tolist())):
                await copy.write_row((index + 1, document, source, index, text, f"Thread {document}", 180))
    async with db.connection() as conn:
        await conn.execute(f"SET LOCAL maintenance_work_mem = '{INDEX_BUILD_MEMORY}'")
        await conn.execute("CREATE INDEX chunks_tsv_idx ON chunks USING gin (tsv)")
    async with db.connection() as conn:
        async with conn.cursor().copy(
            "COPY chunk_embeddings (chunk_id, model, source_id, embedding) FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int8", "text", "int8", "vector"])
            for index, source in enumerate(sources.tolist()):
                await copy.write_row((index + 1, MODEL, source, Vector(vectors[index])))


def audiences(corpus: Corpus, rng: np.random.Generator) -> list[tuple[str, Audience, frozenset[str]]]:
    """(label, audience, the readers' list for its asker) of the three audiences measured."""
    channels = sorted(corpus.channel_ids.values())
    few = frozenset(rng.choice(channels, FEW_CHANNELS, replace=False).tolist())
    most = frozenset(rng.choice(channels, MOST_CHANNELS, replace=False).tolist())
    home = sorted(corpus.public)[0]
    return [
        (f"DM, asker reads {FEW_CHANNELS} of {CHANNELS} channels (selective)",
         Audience(platform="slack", workspace=TEAM, channel="D1", asker="U_FEW", direct=True), few),
        (f"DM, asker reads {MOST_CHANNELS} of {CHANNELS} channels (unselective)",
         Audience(platform="slack", workspace=TEAM, channel="D2", asker="U_MOST", direct=True), most),
        (f"channel without guests: its own + {len(corpus.public)} public channels",
         Audience(platform="slack", workspace=TEAM, channel=home, asker="U_MOST"), frozenset()),
    ]


def scope_of(audience: Audience) -> SourceScope:
    """The scope Runs.config gives a conversation of the team (core.channels.resolve + answer_scope)."""
    grant = f"slack:{TEAM}:dms" if audience.direct else f"slack:{TEAM}:{audience.channel}"
    return SourceScope(audiences=(grant,), owners=(f"slack:{TEAM}", ""), audience=audience)


async def allowed_sources(retriever: PgRetriever, scope: SourceScope) -> list[int]:
    """The source ids the rule lets the scope search, as search_chunks works them out."""
    async with retriever.db.connection() as conn:
        rows = candidates(await source_rows(conn, scope), scope, exposure=None, sources=None)
    return [row.id for row in await apply_rule(rows, scope, retriever.visibility)]


async def hybrid_p95(retriever: PgRetriever, scope: SourceScope, queries: list[tuple[str, np.ndarray]]) -> tuple[float, float]:
    for text, vector in queries[:WARMUP_QUERIES]:
        await retriever.search_chunks(text, limit=RESULTS, token_budget=TOKEN_BUDGET, query_vector=list(vector), scope=scope)
    timings = []
    for text, vector in queries[WARMUP_QUERIES:]:
        started = time.perf_counter()
        hits = await retriever.search_chunks(text, limit=RESULTS, token_budget=TOKEN_BUDGET, exposure="prefetch",
                                             query_vector=list(vector), scope=scope)
        timings.append((time.perf_counter() - started) * 1000)
        assert hits, f"no hits for {text!r}"
    return statistics.median(timings), percentile(timings, 0.95)


async def filtered_recall(retriever: PgRetriever, corpus: Corpus, allowed: list[int], queries: np.ndarray) -> float:
    """recall@10 of the bot's vector branch over the allowed sources against exact search over their chunks."""
    chunks = np.flatnonzero(np.isin(corpus.sources, np.array(allowed)))
    exact = chunks[np.argsort(-(queries @ corpus.vectors[chunks].T), axis=1)[:, :RECALL_AT]] + 1
    found = 0
    for query, truth in zip(queries, exact):
        ranked = await retriever.nearest_chunks(list(query), k=RECALL_AT, source_ids=allowed)
        found += len(set(ranked) & set(truth.tolist()))
    return found / (len(queries) * RECALL_AT)


async def rule_cost(retriever: PgRetriever, scope: SourceScope) -> tuple[float, float]:
    """p50/p95 in ms of what the rule adds to a search: the sources read with their learned channels, the rule."""
    timings = []
    for _ in range(RULE_SAMPLES):
        started = time.perf_counter()
        await allowed_sources(retriever, scope)
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings), percentile(timings, 0.95)


def target(met: bool) -> str:
    return "ok" if met else "MISSES TARGET"


async def run(db: Database, *, scale: float = 1.0) -> bool:
    """Loads the corpus into `db` (fresh, migrated), prints the figures; True when every target is met."""
    rng = np.random.default_rng(SEED)
    started = time.perf_counter()
    corpus = await load(db, rng, scale)
    print(f"retrieval: loaded {len(corpus.sources):,} chunks ({int(MESSAGE_CHUNKS * scale):,} messages over {CHANNELS} "
          f"learned channels, {int(DOCUMENT_CHUNKS * scale):,} of documents) in {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    await ensure_vector_index(db, model=MODEL, dimension=DIMENSION, build_memory=INDEX_BUILD_MEMORY)
    print(f"retrieval: HNSW built in {time.perf_counter() - started:.0f} s; VACUUM ANALYZE {await vacuum(db):.0f} s")
    measured = audiences(corpus, rng)
    facts = BenchFacts({a.asker: readers for _, a, readers in measured if a.direct}, corpus.public)
    visibility = ChannelVisibility()
    visibility.attach("slack", facts)
    retriever = PgRetriever(db, _FixedModel(), visibility=visibility)
    query_vectors = clustered_vectors(rng, QUERIES + WARMUP_QUERIES, corpus.centres)
    picks = rng.integers(0, 1 << 30, (QUERIES + WARMUP_QUERIES, 2))
    wider = PgRetriever(db, _FixedModel(), visibility=visibility, ef_search=WIDER_EF_SEARCH)
    ok = True
    for label, audience, _ in measured:
        scope = scope_of(audience)
        allowed = await allowed_sources(retriever, scope)
        share = np.isin(corpus.sources, np.array(allowed)).mean()
        r50, r95 = await rule_cost(retriever, scope)
        print(f"{label}: searches {len(allowed)} sources, {share:.1%} of the chunks; the sources' read and the rule "
              f"p50 {r50:.1f} ms, p95 {r95:.1f} ms")
        for mix, terms in (("selective terms", corpus.selective_terms), ("unselective terms", corpus.unselective_terms)):
            queries = [(f"{terms[a % len(terms)]} {terms[b % len(terms)]}", query_vectors[i]) for i, (a, b) in enumerate(picks)]
            calls = facts.readable_calls
            p50, p95 = await hybrid_p95(retriever, scope, queries)
            per_search = (facts.readable_calls - calls) / len(queries)
            ok &= p95 <= P95_TARGET_MS
            print(f"  hybrid, {mix}: p50 {p50:.1f} ms, p95 {p95:.1f} ms (target <= {P95_TARGET_MS:.0f}) "
                  f"{target(p95 <= P95_TARGET_MS)}; readable_by calls per search {per_search:.1f}")
        value = await filtered_recall(retriever, corpus, allowed, query_vectors[WARMUP_QUERIES:])
        ok &= value >= RECALL_TARGET
        print(f"  recall@{RECALL_AT} vs exact filtered search (ef_search {EF_SEARCH}): {value:.3f} "
              f"(target >= {RECALL_TARGET}) {target(value >= RECALL_TARGET)}")
    # The same searches with no membership filter and no rule: what this machine gives at this size right now.
    for mix, terms in (("selective terms", corpus.selective_terms), ("unselective terms", corpus.unselective_terms)):
        queries = [(f"{terms[a % len(terms)]} {terms[b % len(terms)]}", query_vectors[i]) for i, (a, b) in enumerate(picks)]
        p50, p95 = await hybrid_p95(retriever, SourceScope(owners=None, every_restricted=True), queries)
        print(f"baseline, every source and no rule, {mix}: p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    every = list(range(1, CHANNELS + DOCUMENT_SOURCES + 1))
    for ef, searcher in ((EF_SEARCH, retriever), (WIDER_EF_SEARCH, wider)):
        value = await filtered_recall(searcher, corpus, every, query_vectors[WARMUP_QUERIES:])
        print(f"recall@{RECALL_AT} with every source (no membership filter), ef_search {ef}: {value:.3f}")
    return ok
