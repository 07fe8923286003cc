"""Builds a real Engine over the test database and the OpenAI emulator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.config import Settings
from bot.engine_parts import build_engine
from core.engine import Engine
from core.llm import LLMClient
from core.retrieval.retriever import Retriever
from core.store.db import Database
from core.tools import ToolRegistry, ToolServices, builtin_registry
from core.tools.approval_policy import PolicyLayer


def test_settings(base_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "llm_base_url": base_url,
        "llm_api_key": "sk-test",
        "llm_model": "test-model",
        "llm_idle_timeout_s": 2.0,
        "llm_request_timeout_s": 10.0,
        "embedding_provider": "none",
        # Most tests check answers alone; feedback's own tests turn the 👍/👎 buttons on.
        "feedback_buttons": False,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)


def make_engine(
    db: Database,
    base_url: str,
    *,
    registry: ToolRegistry | None = None,
    retriever: Retriever | None = None,
    tool_services: ToolServices | None = None,
    approval_layers: Sequence[PolicyLayer] = (),
    **overrides: Any,
) -> Engine:
    settings = test_settings(base_url, **overrides)
    llm = LLMClient(
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key,
        request_timeout_s=settings.llm_request_timeout_s,
        idle_timeout_s=settings.llm_idle_timeout_s,
        retry_backoff_s=0.01,
    )
    return build_engine(
        settings=settings,
        db=db,
        llm=llm,
        registry=registry or builtin_registry(),
        retriever=retriever,
        tool_services=tool_services,
        approval_layers=approval_layers,
    )
