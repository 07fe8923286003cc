"""Tests for core.tokens: exact cl100k counts, message costs, truncation bounds, fallbacks."""

from __future__ import annotations

import pytest

from core import tokens
from core.tokens import (
    CHAR_ESTIMATE_NAME,
    MESSAGE_OVERHEAD_TOKENS,
    OFFLINE_ENCODING_NAME,
    TRUNCATION_MARKER,
    TokenCounter,
    get_token_counter,
)


@pytest.fixture
def cl100k() -> TokenCounter:
    counter = get_token_counter(None)
    assert counter.encoding_name == OFFLINE_ENCODING_NAME
    return counter


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello world", 2),
        ("Hello, world!", 4),
        ("tiktoken is great!", 6),
        ("The quick brown fox jumps over the lazy dog.", 10),
    ],
)
def test_exact_cl100k_counts(cl100k: TokenCounter, text: str, expected: int) -> None:
    assert cl100k.count(text) == expected


def test_special_token_text_is_counted_not_rejected(cl100k: TokenCounter) -> None:
    assert cl100k.count("<|endoftext|>") > 1


def test_count_message_adds_overhead_parts_and_tool_calls(cl100k: TokenCounter) -> None:
    plain = cl100k.count_message({"role": "user", "content": "hello world"})
    assert plain == MESSAGE_OVERHEAD_TOKENS + cl100k.count("user") + 2
    parts = cl100k.count_message(
        {"role": "user", "content": [{"type": "text", "text": "hello world"}, {"type": "text", "text": "hello world"}]}
    )
    assert parts == plain + 2
    with_image = cl100k.count_message(
        {"role": "user", "content": [{"type": "text", "text": "hello world"}, {"type": "image_url", "image_url": {"url": "x"}}]}
    )
    assert with_image == plain + tokens.IMAGE_PART_TOKENS
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "hello world"}'}}
    ]}
    assert cl100k.count_message(call) > MESSAGE_OVERHEAD_TOKENS + cl100k.count("assistant") + cl100k.count("search")


def test_truncate_middle_keeps_short_text(cl100k: TokenCounter) -> None:
    assert cl100k.truncate_middle("hello world", 2) == "hello world"


@pytest.mark.parametrize("limit", [1, 5, 8, 9, 20, 50, 333])
def test_truncate_middle_respects_bound_and_keeps_ends(cl100k: TokenCounter, limit: int) -> None:
    text = " ".join(f"word{i} ünïcødé 🙂" for i in range(600))
    result = cl100k.truncate_middle(text, limit)
    assert cl100k.count(result) <= limit
    if limit > cl100k.count(TRUNCATION_MARKER) + 4:
        assert TRUNCATION_MARKER in result
        assert result.startswith("word0")
        assert result.endswith("🙂")


def test_truncate_middle_zero_budget(cl100k: TokenCounter) -> None:
    assert cl100k.truncate_middle("some long text here", 0) == ""


def test_unknown_or_uncached_model_uses_offline_encoding(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    get_token_counter.cache_clear()
    try:
        assert get_token_counter("gpt-4o").encoding_name == OFFLINE_ENCODING_NAME
        assert get_token_counter("llama-3.1-70b").encoding_name == OFFLINE_ENCODING_NAME
    finally:
        get_token_counter.cache_clear()


def test_cache_detection_follows_tiktoken_layout(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert not tokens.is_encoding_cached("o200k_base")
    import hashlib

    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(b"")
    assert tokens.is_encoding_cached("o200k_base")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    assert not tokens.is_encoding_cached("o200k_base")


def test_char_estimate_fallback(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def unavailable(name: str) -> None:
        raise ValueError(f"Unknown encoding {name}")

    monkeypatch.setattr(tokens.tiktoken, "get_encoding", unavailable)
    tokens._load_offline_encoding.cache_clear()
    get_token_counter.cache_clear()
    try:
        counter = get_token_counter("some-model")
        get_token_counter("other-model")
        assert counter.encoding_name == CHAR_ESTIMATE_NAME
        assert counter.count("abcdefgh") == 2
        assert counter.count("abcdefghi") == 3
        assert sum("estimating tokens" in r.message for r in caplog.records) == 1
        text = "x" * 4000
        result = counter.truncate_middle(text, 100)
        assert counter.count(result) <= 100
        assert TRUNCATION_MARKER in result
    finally:
        tokens._load_offline_encoding.cache_clear()
        get_token_counter.cache_clear()


def test_a_counter_keeps_no_python_copy_of_its_merge_ranks_and_still_encodes_and_decodes(cl100k: TokenCounter) -> None:
    """The ranks' Python copy is only for pickling (~16 MB a process): it is dropped, and the encoding still works."""
    encoding = cl100k._encoding
    assert encoding is not None and encoding._mergeable_ranks == {}
    ids = encoding.encode("Point them all at one DATABASE_URL. 🚀", disallowed_special=())
    assert encoding.decode(ids) == "Point them all at one DATABASE_URL. 🚀"
    assert cl100k.count("hello world") == 2
