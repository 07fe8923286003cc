"""What each model can do (context, tools, structured output, vision), with safe defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    """A configured model: `name` is what settings call it, `upstream_id` what the provider is sent."""

    name: str
    upstream_id: str
    context_limit: int
    supports_tools: bool
    supports_structured_output: bool
    supports_vision: bool
    max_output_tokens: int


@dataclass(frozen=True, kw_only=True)
class _Spec:
    context_limit: int
    max_output_tokens: int
    tools: bool = True
    structured: bool = False
    vision: bool = False


# Unknown models get a small context and no optional features, so nothing is sent that they reject.
DEFAULT_SPEC = _Spec(context_limit=8192, max_output_tokens=4096, tools=True, structured=False, vision=False)

# Keys are lower-case name prefixes; the longest prefix that matches wins.
KNOWN_MODELS: Mapping[str, _Spec] = {
    # OpenAI
    "gpt-5": _Spec(context_limit=400_000, max_output_tokens=128_000, structured=True, vision=True),
    "gpt-4.1": _Spec(context_limit=1_047_576, max_output_tokens=32_768, structured=True, vision=True),
    "gpt-4o": _Spec(context_limit=128_000, max_output_tokens=16_384, structured=True, vision=True),
    "chatgpt-4o": _Spec(context_limit=128_000, max_output_tokens=16_384, structured=False, vision=True),
    "gpt-4-turbo": _Spec(context_limit=128_000, max_output_tokens=4_096, vision=True),
    "gpt-4": _Spec(context_limit=8_192, max_output_tokens=8_192),
    "gpt-4-32k": _Spec(context_limit=32_768, max_output_tokens=8_192),
    "gpt-3.5-turbo": _Spec(context_limit=16_385, max_output_tokens=4_096),
    "gpt-oss": _Spec(context_limit=131_072, max_output_tokens=32_768, structured=True),
    "o1": _Spec(context_limit=200_000, max_output_tokens=100_000, structured=True, vision=True),
    "o1-mini": _Spec(context_limit=128_000, max_output_tokens=65_536, tools=False),
    "o1-preview": _Spec(context_limit=128_000, max_output_tokens=32_768, tools=False),
    "o3": _Spec(context_limit=200_000, max_output_tokens=100_000, structured=True, vision=True),
    "o3-mini": _Spec(context_limit=200_000, max_output_tokens=100_000, structured=True),
    "o4-mini": _Spec(context_limit=200_000, max_output_tokens=100_000, structured=True, vision=True),
    # Llama (Meta naming and Ollama naming)
    "llama-3": _Spec(context_limit=8_192, max_output_tokens=4_096),
    "llama3": _Spec(context_limit=8_192, max_output_tokens=4_096),
    "llama-3.1": _Spec(context_limit=131_072, max_output_tokens=8_192),
    "llama3.1": _Spec(context_limit=131_072, max_output_tokens=8_192),
    "llama-3.2": _Spec(context_limit=131_072, max_output_tokens=8_192),
    "llama3.2": _Spec(context_limit=131_072, max_output_tokens=8_192),
    "llama-3.2-11b-vision": _Spec(context_limit=131_072, max_output_tokens=8_192, vision=True),
    "llama-3.2-90b-vision": _Spec(context_limit=131_072, max_output_tokens=8_192, vision=True),
    "llama3.2-vision": _Spec(context_limit=131_072, max_output_tokens=8_192, vision=True),
    "llama-3.3": _Spec(context_limit=131_072, max_output_tokens=8_192),
    "llama3.3": _Spec(context_limit=131_072, max_output_tokens=8_192),
    "llama-4": _Spec(context_limit=131_072, max_output_tokens=8_192, vision=True),
    "llama4": _Spec(context_limit=131_072, max_output_tokens=8_192, vision=True),
    # Qwen
    "qwen2.5": _Spec(context_limit=32_768, max_output_tokens=8_192),
    "qwen-2.5": _Spec(context_limit=32_768, max_output_tokens=8_192),
    "qwen2.5-vl": _Spec(context_limit=32_768, max_output_tokens=8_192, vision=True),
    "qwen3": _Spec(context_limit=32_768, max_output_tokens=8_192),
    "qwen-max": _Spec(context_limit=32_768, max_output_tokens=8_192),
    "qwen-plus": _Spec(context_limit=131_072, max_output_tokens=8_192),
    # Mistral
    "mistral": _Spec(context_limit=32_768, max_output_tokens=8_192),
    "mistral-large": _Spec(context_limit=131_072, max_output_tokens=8_192, structured=True),
    "mistral-medium": _Spec(context_limit=131_072, max_output_tokens=8_192, structured=True, vision=True),
    "mistral-small": _Spec(context_limit=32_768, max_output_tokens=8_192, structured=True),
    "mistral-nemo": _Spec(context_limit=131_072, max_output_tokens=8_192),
    "mixtral": _Spec(context_limit=32_768, max_output_tokens=8_192),
    "codestral": _Spec(context_limit=32_768, max_output_tokens=8_192),
    "pixtral": _Spec(context_limit=131_072, max_output_tokens=8_192, vision=True),
}

_FIELDS: Mapping[str, type] = {
    "context_limit": int,
    "supports_tools": bool,
    "supports_structured_output": bool,
    "supports_vision": bool,
    "max_output_tokens": int,
}


def resolve_model(name: str, *, upstream_id: str | None = None, overrides: Mapping[str, Any] | None = None) -> ModelInfo:
    """Capabilities for `name` (looked up by the upstream id first), then `overrides` by field name."""
    upstream = upstream_id or name
    spec = _lookup(upstream) or _lookup(name) or DEFAULT_SPEC
    info = ModelInfo(
        name=name,
        upstream_id=upstream,
        context_limit=spec.context_limit,
        supports_tools=spec.tools,
        supports_structured_output=spec.structured,
        supports_vision=spec.vision,
        max_output_tokens=spec.max_output_tokens,
    )
    if overrides:
        info = dataclasses.replace(info, **_checked_overrides(overrides))
    return info


def _lookup(model_id: str) -> _Spec | None:
    # Providers prefix ids with an org or route ("meta-llama/…", "openrouter/openai/…"); ignore it.
    key = model_id.rsplit("/", 1)[-1].strip().lower()
    best: str | None = None
    for prefix in KNOWN_MODELS:
        if _matches(key, prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return KNOWN_MODELS[best] if best is not None else None


def _matches(key: str, prefix: str) -> bool:
    # A prefix ends at a separator: "gpt-4o" matches "gpt-4o-2024-08-06", "o1" does not match "o10".
    return key.startswith(prefix) and (len(key) == len(prefix) or not key[len(prefix)].isalnum())


def _checked_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    checked: dict[str, Any] = {}
    for key, value in overrides.items():
        expected = _FIELDS.get(key)
        if expected is None:
            raise ValueError(f"unknown model override {key!r}; known: {', '.join(_FIELDS)}")
        checked[key] = _coerce(key, value, expected)
    return checked


def _coerce(key: str, value: Any, expected: type) -> Any:
    if expected is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.strip().lower() in ("true", "1", "yes")
        raise ValueError(f"model override {key!r} must be true or false, got {value!r}")
    if isinstance(value, bool):
        raise ValueError(f"model override {key!r} must be a whole number, got {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"model override {key!r} must be a whole number, got {value!r}") from None
    if number <= 0:
        raise ValueError(f"model override {key!r} must be positive, got {value!r}")
    return number
