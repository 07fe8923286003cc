"""Embedding providers: the OpenAI-compatible client against local servers, the real local model."""

from __future__ import annotations

import asyncio
import builtins
import math
import threading
from typing import Any

import pytest
from aiohttp import web

from core.retrieval import embeddings as embeddings_module
from core.retrieval.embeddings import (
    EmbeddingError,
    EmbeddingProvider,
    EmbeddingsUnavailable,
    LocalEmbeddings,
    OpenAIEmbeddings,
    make_embedding_provider,
)
from tests.emulators.openai_server import OpenAIEmulator


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


async def test_openai_embeddings_batch_keep_order_and_learn_the_dimension(openai_emulator: OpenAIEmulator) -> None:
    provider = OpenAIEmbeddings(
        base_url=openai_emulator.base_url, api_key="k", model="text-embedding-3-small", batch_size=2
    )
    assert provider.name == "openai:text-embedding-3-small"
    assert provider.dimension == 0
    texts = ["postgres backups", "", "slack bot tokens", "postgres backups nightly", "discord"]
    vectors = await provider.embed(texts)
    await provider.aclose()
    assert len(vectors) == 5
    assert provider.dimension == openai_emulator.embedding_dim == len(vectors[0])
    assert openai_emulator.embedding_inputs == [
        ["postgres backups", " "],
        ["slack bot tokens", "postgres backups nightly"],
        ["discord"],
    ]
    assert _cosine(vectors[0], vectors[3]) > _cosine(vectors[0], vectors[2])


async def test_openai_embeddings_probe_the_dimension_once(openai_emulator: OpenAIEmulator) -> None:
    provider = OpenAIEmbeddings(base_url=openai_emulator.base_url, api_key="k", model="some-model")
    assert await provider.ensure_dimension() == openai_emulator.embedding_dim
    assert await provider.ensure_dimension() == openai_emulator.embedding_dim
    assert openai_emulator.embedding_calls == 1
    await provider.aclose()


async def test_a_wrong_configured_dimension_is_a_clear_error(openai_emulator: OpenAIEmulator) -> None:
    provider = OpenAIEmbeddings(base_url=openai_emulator.base_url, api_key="k", model="some-model", dimension=7)
    with pytest.raises(EmbeddingError) as failed:
        await provider.embed(["x"])
    assert "EMBEDDING_DIMENSION" in str(failed.value)
    await provider.aclose()


async def test_a_bad_key_is_a_clear_error() -> None:
    async with OpenAIEmulator(api_key="right") as emulator:
        provider = OpenAIEmbeddings(base_url=emulator.base_url, api_key="wrong", model="m", max_retries=0)
        with pytest.raises(EmbeddingError) as failed:
            await provider.embed(["x"])
        await provider.aclose()
    assert "EMBEDDING_API_KEY" in str(failed.value)


class FlakyEmbeddingsServer:
    """Answers 429, then 503, then a real embeddings response."""

    def __init__(self) -> None:
        self.requests = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> FlakyEmbeddingsServer:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _embeddings(self, request: web.Request) -> web.Response:
        self.requests += 1
        body: dict[str, Any] = await request.json()
        if self.requests == 1:
            return web.json_response({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "0"})
        if self.requests == 2:
            return web.json_response({"error": {"message": "busy"}}, status=503, headers={"Retry-After": "0"})
        data = [
            {"object": "embedding", "index": i, "embedding": [1.0, 0.0, float(i)]} for i in range(len(body["input"]))
        ]
        usage = {"prompt_tokens": 1, "total_tokens": 1}
        return web.json_response({"object": "list", "data": data, "model": body["model"], "usage": usage})


async def test_rate_limits_and_server_errors_are_retried() -> None:
    async with FlakyEmbeddingsServer() as server:
        provider = OpenAIEmbeddings(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="k", model="m")
        vectors = await provider.embed(["a", "b"])
        await provider.aclose()
    assert server.requests == 3
    assert vectors == [[1.0, 0.0, 0.0], [1.0, 0.0, 1.0]]


def test_the_factory_builds_each_provider_and_rejects_unknown_ones() -> None:
    common: dict[str, Any] = {"model": None, "base_url": None, "api_key": None, "dimension": None}
    assert make_embedding_provider(provider="none", **common) is None
    local = make_embedding_provider(provider="local", **common)
    assert isinstance(local, LocalEmbeddings) and isinstance(local, EmbeddingProvider)
    assert local.name == "local:all-MiniLM-L6-v2" and local.dimension == 384
    remote = make_embedding_provider(
        provider="openai", model="text-embedding-3-small", base_url="http://127.0.0.1:9/v1", api_key="k", dimension=None
    )
    assert isinstance(remote, OpenAIEmbeddings)
    with pytest.raises(ValueError, match="openai, local or none"):
        make_embedding_provider(provider="cohere", **common)
    with pytest.raises(ValueError, match="EMBEDDING_MODEL"):
        make_embedding_provider(provider="openai", **common)


def test_missing_torch_packages_say_how_to_install_them(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = embeddings_module.importlib.util.find_spec

    def without_torch(name: str, *args: Any) -> Any:
        return None if name == "torch" else real_find_spec(name, *args)

    monkeypatch.setattr(embeddings_module.importlib.util, "find_spec", without_torch)
    with pytest.raises(EmbeddingsUnavailable) as unavailable:
        LocalEmbeddings(runtime="torch")
    message = str(unavailable.value)
    assert "pip install torch==2.13.0" in message and "relaybot[local-torch]" in message
    assert "relaybot[local]" in message  # the lean way, too


@pytest.mark.parametrize(
    ("runtime", "module", "extra"), [("onnx", "onnxruntime", "local"), ("torch", "sentence_transformers", "local-torch")]
)
def test_a_failing_import_while_loading_is_reported_the_same_way(
    monkeypatch: pytest.MonkeyPatch, runtime: Any, module: str, extra: str
) -> None:
    real_import = builtins.__import__

    def broken_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == module:
            raise ImportError("shared library missing")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(embeddings_module, "_LOCAL_MODELS", {})
    monkeypatch.setattr(builtins, "__import__", broken_import)
    with pytest.raises(EmbeddingsUnavailable, match=f"relaybot\\[{extra}\\]"):
        embeddings_module._load_local_model(runtime)


class RecordingModel:
    """Delegates to the real model, noting which thread each encode runs in."""

    def __init__(self, model: Any, threads: list[threading.Thread]) -> None:
        self._model = model
        self._threads = threads

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        self._threads.append(threading.current_thread())
        return self._model.encode(*args, **kwargs)


@pytest.mark.parametrize("runtime", ["onnx", "torch"])
async def test_local_model_puts_similar_sentences_closer_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, runtime: Any
) -> None:
    if runtime == "torch":
        pytest.importorskip("sentence_transformers", reason="relaybot[local-torch] is not installed here")
    threads: list[threading.Thread] = []
    real_load = embeddings_module._load_local_model

    def recording_load(chosen: Any) -> Any:
        threads.append(threading.current_thread())
        return RecordingModel(real_load(chosen), threads)

    monkeypatch.setattr(embeddings_module, "_load_local_model", recording_load)
    provider = LocalEmbeddings(runtime=runtime)
    first, second = await asyncio.gather(
        provider.embed(["How do I restore the Postgres database from a backup?"]),
        provider.embed(
            [
                "Restoring the database from last night's backup",
                "The cat sat on the warm windowsill in the sun.",
            ]
        ),
    )
    vectors = first + second
    assert len(threads) == 3  # one load, shared by both concurrent calls, then two encodes
    assert all(thread is not threading.main_thread() for thread in threads)
    assert all(len(v) == 384 for v in vectors)
    assert abs(sum(x * x for x in vectors[0]) - 1.0) < 1e-3  # normalised
    assert _cosine(vectors[0], vectors[1]) > _cosine(vectors[0], vectors[2]) + 0.2
    assert await provider.embed([]) == []
