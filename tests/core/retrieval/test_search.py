"""Hybrid search with the real local model: meaning, exact terms, fusion, and the index plans it relies on."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg import sql

from core.retrieval.embeddings import LocalEmbeddings
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.search import (
    EF_SEARCH,
    ChunkHit,
    PgRetriever,
    fit_budget,
    fulltext_statement,
    reciprocal_rank_fusion,
    vector_statement,
)
from core.retrieval.store import (
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    ensure_vector_index,
    vector_expression,
    vector_index_name,
    vector_index_prefix,
    vector_predicate,
)
from core.store.db import Database
from tests.core.retrieval.test_loaders import minimal_pdf

PARAPHRASES = [
    ("Can I bring my puppy to work?", "pets.md"),
    ("how do I get paid back for a plane ticket", "travel.html"),
    ("where should I leave my automobile", "parking.pdf"),
]


@pytest.fixture(scope="module")
def local_embedder() -> LocalEmbeddings:
    return LocalEmbeddings()


@pytest.fixture
async def ingested(db: Database, local_embedder: LocalEmbeddings, tmp_path: Path) -> Database:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
    root = tmp_path / "docs"
    root.mkdir()
    (root / "pets.md").write_text(
        "# Pet policy\n\nDogs and cats are welcome in the office on Fridays if they are vaccinated.\n"
    )
    (root / "travel.html").write_text(
        "<html><head><title>Travel expenses</title></head><body><h1>Travel expenses</h1>"
        "<p>Flights and hotels are reimbursed within thirty days after submitting receipts.</p></body></html>"
    )
    (root / "parking.pdf").write_bytes(
        minimal_pdf("Employees park their cars in the underground garage, level two.", title="Parking")
    )
    summary = await ingest(
        db, IngestRequest(source="handbook", exposure="prefetch", targets=[str(root)]),
        embedder=local_embedder,
    )
    assert summary.added == 3 and summary.embeddings == summary.chunks
    return db


async def test_an_index_built_another_way_is_replaced_by_one_with_this_versions_build_parameters(
    ingested: Database, local_embedder: LocalEmbeddings
) -> None:
    model, dimension = local_embedder.name, 384
    old = vector_index_prefix(model, dimension)  # how indexes were named before their parameters were
    async with ingested.connection() as conn:
        await conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(vector_index_name(model, dimension))))
        await conn.execute(
            sql.SQL("CREATE INDEX {} ON chunk_embeddings USING hnsw ({} vector_cosine_ops) WHERE {}").format(
                sql.Identifier(old), vector_expression(dimension), vector_predicate(model, dimension)
            )
        )
    assert await ensure_vector_index(ingested, model=model, dimension=dimension)
    async with ingested.connection() as conn:
        cursor = await conn.execute(
            "SELECT i.indexname, c.reloptions FROM pg_indexes i JOIN pg_class c ON c.relname = i.indexname"
            " WHERE i.tablename = 'chunk_embeddings' AND i.indexdef LIKE '%%hnsw%%'"
        )
        rows = await cursor.fetchall()
    assert rows == [(vector_index_name(model, dimension), [f"m={HNSW_M}", f"ef_construction={HNSW_EF_CONSTRUCTION}"])]
    found = await PgRetriever(ingested, local_embedder).search("where should I leave my automobile", limit=3)
    assert found[0].uri.endswith("parking.pdf")


@pytest.mark.parametrize(("query", "expected"), PARAPHRASES)
async def test_local_embeddings_find_a_paraphrase_that_shares_no_words(
    ingested: Database, local_embedder: LocalEmbeddings, query: str, expected: str
) -> None:
    assert not await PgRetriever(ingested, None).search(query, limit=3)  # words alone find nothing
    found = await PgRetriever(ingested, local_embedder).search(query, limit=3)
    assert found[0].uri.endswith(expected)
    assert found[0].source == "handbook" and found[0].chunk_id is not None


async def test_an_exact_term_is_found_by_full_text(ingested: Database, local_embedder: LocalEmbeddings) -> None:
    found = await PgRetriever(ingested, local_embedder).search("vaccinated", limit=3)
    assert found[0].uri.endswith("pets.md") and "vaccinated" in found[0].text
    assert found[0].title == "Pet policy"
    lexical = PgRetriever(ingested, None)
    # Chunks holding every word rank above chunks holding some; stop words alone find nothing.
    both = await lexical.search_chunks("garage receipts", limit=3)
    assert {hit.uri.rsplit("/", 1)[-1] for hit in both} == {"parking.pdf", "travel.html"}
    assert [hit.uri.rsplit("/", 1)[-1] for hit in await lexical.search_chunks("underground garage", limit=3)] == [
        "parking.pdf"
    ]
    assert await lexical.search_chunks("the and of", limit=3) == []
    assert [h.uri.rsplit("/", 1)[-1] for h in await lexical.search_chunks('"garage level" -cats', limit=3)] == [
        "parking.pdf"
    ]


async def test_the_planner_uses_the_models_hnsw_index_and_the_gin_index(
    ingested: Database, local_embedder: LocalEmbeddings
) -> None:
    [vector] = await local_embedder.embed(["garage"])
    async with ingested.connection() as conn:
        cursor = await conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'chunk_embeddings' AND indexdef LIKE '%hnsw%'"
        )
        assert [row[0] for row in await cursor.fetchall()] == [vector_index_name(local_embedder.name, 384)]
        # A table this small is cheaper to scan; forbid that to see whether the index *matches* the query.
        await conn.execute("SET LOCAL enable_seqscan = off")
        for filtered in (False, True):
            plan = await conn.execute(
                b"EXPLAIN " + vector_statement(local_embedder.name, 384, filtered=filtered).as_bytes(conn),
                {"v": vector, "k": 10, "ids": [1]},
            )
            text = "\n".join(row[0] for row in await plan.fetchall())
            assert vector_index_name(local_embedder.name, 384) in text, text
        statement = fulltext_statement("'garag'", filtered=False).as_bytes(conn)
        plan = await conn.execute(b"EXPLAIN " + statement, {"n": 50, "k": 10})
        text = "\n".join(row[0] for row in await plan.fetchall())
        assert "chunks_tsv_idx" in text, text


async def test_ef_search_is_set_for_the_query_transaction(ingested: Database, local_embedder: LocalEmbeddings) -> None:
    retriever = PgRetriever(ingested, local_embedder, ef_search=EF_SEARCH + 7)
    async with ingested.connection() as conn:
        await retriever._vector_ranking(conn, (await local_embedder.embed(["x"]))[0], k=3, source_ids=None)
        cursor = await conn.execute("SHOW hnsw.ef_search")
        assert (await cursor.fetchone())[0] == str(EF_SEARCH + 7)
    async with ingested.connection() as conn:
        cursor = await conn.execute("SHOW hnsw.ef_search")
        assert (await cursor.fetchone())[0] != str(EF_SEARCH + 7)  # SET LOCAL ended with the transaction


def test_reciprocal_rank_fusion_rewards_agreement() -> None:
    fused = reciprocal_rank_fusion([[1, 2, 3], [3, 4]])
    assert [chunk_id for chunk_id, _ in fused] == [3, 1, 2, 4]
    assert fused[0][1] == pytest.approx(1 / 63 + 1 / 61)


def test_fit_budget_keeps_order_limit_and_token_budget() -> None:
    hits = [
        ChunkHit(chunk_id=i, score=1.0, text="t", title="", heading_path=(), uri="", source="s", token_count=n)
        for i, n in enumerate([300, 900, 200, 100])
    ]
    assert [h.chunk_id for h in fit_budget(hits, limit=10, token_budget=600)] == [0, 2, 3]
    assert [h.chunk_id for h in fit_budget(hits, limit=2, token_budget=None)] == [0, 1]
