"""The configured embedding provider and document retriever, shared by the runtime, the CLI and doctor."""

from __future__ import annotations

from core.config import Settings
from core.learning.visibility import ChannelVisibility
from core.redact import redact_url
from core.retrieval.embeddings import (
    INSTALL_LOCAL_HINT,
    LOCAL_DIMENSION,
    LOCAL_MODEL_NAME,
    EmbeddingProvider,
    EmbeddingsUnavailable,
    make_embedding_provider,
    missing_local_packages,
)
from core.retrieval.crawl import FetchPolicy
from core.retrieval.ingest import URL_TIMEOUT_S
from core.retrieval.search import PgRetriever
from core.store.db import Database


def embedding_provider(settings: Settings) -> EmbeddingProvider | None:
    """The configured embedding provider; any configuration problem is an EmbeddingsUnavailable sentence."""
    try:
        return make_embedding_provider(
            provider=settings.embedding_provider,
            model=settings.embedding_model,
            base_url=settings.embedding_base_url or settings.llm_base_url,
            api_key=settings.embedding_api_key or settings.llm_api_key,
            dimension=settings.embedding_dimension,
        )
    except ValueError as error:
        raise EmbeddingsUnavailable(str(error)) from None


async def close_provider(provider: EmbeddingProvider | None) -> None:
    close = getattr(provider, "aclose", None)
    if close is not None:
        await close()


def describe_embeddings(settings: Settings) -> str:
    """One line for `doctor`: which provider and model embed documents and queries."""
    kind = settings.embedding_provider
    if kind == "none":
        return "none — keyword (full-text) search only"
    if kind == "local":
        missing = missing_local_packages()
        line = f"local {LOCAL_MODEL_NAME} ({LOCAL_DIMENSION} dimensions, on this machine's CPU)"
        return f"{line} — UNAVAILABLE: {', '.join(missing)} not installed. {INSTALL_LOCAL_HINT}" if missing else line
    base_url = settings.embedding_base_url or settings.llm_base_url
    model = settings.embedding_model or "(EMBEDDING_MODEL is not set)"
    dimension = f", {settings.embedding_dimension} dimensions" if settings.embedding_dimension else ""
    return f"openai {model} at {redact_url(base_url)}{dimension}"


async def build_retriever(settings: Settings, db: Database, *, visibility: ChannelVisibility | None = None) -> PgRetriever:
    """The runtime's retriever over the open database, learned channels seen through `visibility` (none without it);
    raises EmbeddingsUnavailable with a sentence."""
    return PgRetriever(db, embedding_provider(settings), visibility=visibility)


def fetch_policy(settings: Settings) -> FetchPolicy:
    """What ingestion's fetches may reach, from the INGEST_* settings."""
    return FetchPolicy(
        allow_private=settings.ingest_allow_private,
        allowed_networks=settings.ingest_allowed_networks,
        max_url_bytes=settings.ingest_max_url_bytes,
        timeout_s=URL_TIMEOUT_S,
    )
