"""No question waits for an embedding model that nothing stored needs; when vectors exist, it loads at startup."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from core.retrieval import search
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.search import PgRetriever
from core.store.db import Database

DIMENSION = 8


class CountingEmbedder:
    """Stands in for the local model: counts loads and embeddings, so a test can see what a question cost."""

    name = "local:counting"
    dimension = DIMENSION

    def __init__(self) -> None:
        self.loads = 0
        self.embedded = 0

    async def warm_up(self) -> None:
        self.loads += 1

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.loads = max(self.loads, 1)
        self.embedded += len(texts)
        return [[1.0] + [0.0] * (DIMENSION - 1) for _ in texts]


async def test_words_only_without_loading_the_model_until_some_chunk_has_vectors(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with db.connection() as conn:
        await conn.execute("TRUNCATE sources, documents, chunks, chunk_embeddings CASCADE")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "deploy.md").write_text("# Deploy\nRun the deploy script on Fridays.\n")
    await ingest(db, IngestRequest(source="words", exposure="prefetch", targets=[str(docs)]), embedder=None)
    embedder = CountingEmbedder()
    retriever = PgRetriever(db, embedder)
    # Look again at every question, so the test sees vectors as soon as they are stored.
    monkeypatch.setattr(search, "NO_VECTORS_RECHECK_S", 0.0)

    await retriever.warm_up()
    found = await retriever.search("deploy script", limit=3)
    assert found and "deploy script" in found[0].text
    assert (embedder.loads, embedder.embedded) == (0, 0), "nothing stored needs the model: it is never loaded"

    await ingest(db, IngestRequest(source="vectors", exposure="prefetch", targets=[str(docs)]), embedder=embedder)
    fresh = PgRetriever(db, CountingEmbedder())
    await fresh.warm_up()
    assert fresh.embedder.loads == 1  # type: ignore[union-attr]
    before = embedder.embedded
    await retriever.search("deploy script", limit=3)
    assert embedder.embedded == before + 1, "once vectors exist, the question is embedded"


async def test_a_question_of_a_hundred_kilobytes_is_searched_not_failed(db: Database) -> None:
    found = await PgRetriever(db, None).search("Question q1: please read all of this. " + "lorem ipsum " * 8_333, limit=3)
    assert isinstance(found, list)
