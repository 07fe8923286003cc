"""The language-model layer: an OpenAI-compatible client, model capabilities and errors."""

from __future__ import annotations

from core.llm.client import LLMClient
from core.llm.errors import LLMError
from core.llm.models import ModelInfo, resolve_model
from core.llm.results import Completion, TextPiece, ToolCallRequest

__all__ = ["Completion", "LLMClient", "LLMError", "ModelInfo", "TextPiece", "ToolCallRequest", "resolve_model"]
