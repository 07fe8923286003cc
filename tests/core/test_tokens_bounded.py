"""Token counting does bounded work on text users control (issue 21: the fuzz suite's loop stalls in count)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from core.tokens import (
    ENCODE_PIECE_CHARS,
    EXACT_COUNT_MAX_CHARS,
    TRUNCATION_MARKER,
    WINDOW_CHARS_PER_TOKEN,
    TokenCounter,
    get_token_counter,
)


class RecordingEncoding:
    """The real cl100k encoding, noting how many characters each encode is given."""

    def __init__(self) -> None:
        self._real = get_token_counter(None)._encoding
        assert self._real is not None
        self.name = self._real.name
        self.encoded: list[int] = []

    def encode(self, text: str, **options: Any) -> list[int]:
        self.encoded.append(len(text))
        return self._real.encode(text, **options)

    def decode(self, ids: list[int]) -> str:
        return self._real.decode(ids)

    def exact(self, text: str) -> int:
        return len(self._real.encode(text, disallowed_special=()))


def _prose(chars: int, seed: int = 21) -> str:
    rng = random.Random(seed)
    words = ["the", "deploy", "status,", "is", "green.", "Ünïcode", "naïve", "configuration\n", "42", "🙂", "(see", "docs)"]
    text = ""
    while len(text) < chars:
        text += " ".join(rng.choice(words) for _ in range(200)) + " "
    return text[:chars]


@pytest.fixture
def encoding() -> RecordingEncoding:
    return RecordingEncoding()


def test_a_long_text_is_counted_from_a_bounded_part_of_it_and_close_to_exact(encoding: RecordingEncoding) -> None:
    counter = TokenCounter(encoding=encoding)  # type: ignore[arg-type]
    text = _prose(1_000_000)
    counted = counter.count(text)
    assert sum(encoding.encoded) <= EXACT_COUNT_MAX_CHARS
    assert abs(counted - encoding.exact(text)) <= encoding.exact(text) * 0.03


def test_an_unbroken_run_is_encoded_in_pieces(encoding: RecordingEncoding) -> None:
    # 150,000 "a"s in one encode held the loop for 0.2-0.3 s: tiktoken's merges grow faster than the run.
    counter = TokenCounter(encoding=encoding)  # type: ignore[arg-type]
    text = "a" * 11_000
    assert counter.count(text) == encoding.exact(text)
    assert max(encoding.encoded) <= ENCODE_PIECE_CHARS


def test_ordinary_text_up_to_the_exact_bound_counts_exactly(encoding: RecordingEncoding) -> None:
    counter = TokenCounter(encoding=encoding)  # type: ignore[arg-type]
    for length in (300, 2_500, 7_777, EXACT_COUNT_MAX_CHARS):
        text = _prose(length, seed=length)
        assert counter.count(text) == encoding.exact(text)


def test_a_count_is_remembered(encoding: RecordingEncoding) -> None:
    # Every model call of a run counts its whole prompt: the history's long messages again and again.
    counter = TokenCounter(encoding=encoding)  # type: ignore[arg-type]
    text = _prose(5_000)
    first = counter.count(text)
    encoding.encoded.clear()
    assert counter.count(text) == first and encoding.encoded == []


@pytest.mark.parametrize("max_tokens", [50, 1_000, 6_000])
def test_truncating_a_huge_text_reads_windows_at_its_ends(encoding: RecordingEncoding, max_tokens: int) -> None:
    counter = TokenCounter(encoding=encoding)  # type: ignore[arg-type]
    text = _prose(1_000_000)
    result = counter.truncate_middle(text, max_tokens)
    assert sum(encoding.encoded) <= EXACT_COUNT_MAX_CHARS + 2 * max_tokens * WINDOW_CHARS_PER_TOKEN + 4 * ENCODE_PIECE_CHARS
    assert encoding.exact(result) <= max_tokens
    assert encoding.exact(result) >= max_tokens * 0.9  # not needlessly short
    head, tail = result.split(TRUNCATION_MARKER)
    assert text.startswith(head) and text.endswith(tail.lstrip("\ufffd"))


def test_truncating_an_unbroken_run_keeps_within_the_budget(encoding: RecordingEncoding) -> None:
    counter = TokenCounter(encoding=encoding)  # type: ignore[arg-type]
    result = counter.truncate_middle("a" * 150_000, 2_000)
    assert encoding.exact(result) <= 2_000 and max(encoding.encoded) <= ENCODE_PIECE_CHARS
