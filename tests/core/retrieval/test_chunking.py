"""Chunking: headings give paths, chunks overlap, the token bound holds, the work stays linear."""

from __future__ import annotations

import random

import pytest

from core.retrieval.chunking import Chunk, chunk_document
from core.tokens import get_token_counter

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()


class CountingCounter:
    """Wraps the real counter and records how much text it was asked to count."""

    def __init__(self) -> None:
        self.inner = get_token_counter()
        self.calls = 0
        self.chars = 0

    def count(self, text: str) -> int:
        self.calls += 1
        self.chars += len(text)
        return self.inner.count(text)


def _prose(rng: random.Random, sentences: int) -> str:
    return " ".join(
        " ".join(rng.choices(WORDS, k=rng.randint(4, 20))).capitalize() + "." for _ in range(sentences)
    )


def _big_document(rng: random.Random, paragraphs: int) -> str:
    parts = []
    for index in range(paragraphs):
        if index % 15 == 0:
            parts.append(f"## Part {index}")
        parts.append(_prose(rng, rng.randint(1, 9)))
    return "\n\n".join(parts)


def test_heading_paths_follow_the_outline_and_skip_the_title() -> None:
    doc = (
        "# Guide\n\nWelcome to the guide.\n\n"
        "## Setup\n\nInstall the tools.\n\n"
        "### Database\n\nRun Postgres.\n\n```sh\n# not a heading\n\necho hi\n```\n\n"
        "## Usage\n\nAsk the bot.\n\n"
        "Legacy\n------\n\nSetext headings count too.\n"
    )
    chunks = chunk_document(doc, title="Guide", max_tokens=200, overlap_tokens=10)
    paths = [c.heading_path for c in chunks]
    assert paths == [(), ("Setup",), ("Setup", "Database"), ("Usage",), ("Legacy",)]
    assert [c.order for c in chunks] == list(range(len(chunks)))
    assert "# not a heading" in chunks[2].text and "echo hi" in chunks[2].text
    assert all(c.title == "Guide" for c in chunks)
    assert chunks[2].contextual_text.startswith("Guide › Setup › Database\n\n### Database")


def test_a_heading_with_nothing_under_it_makes_no_chunk() -> None:
    chunks = chunk_document("# A\n\n## B\n\nbody text\n", title="Doc", max_tokens=100, overlap_tokens=0)
    assert [(c.heading_path, c.text) for c in chunks] == [(("A", "B"), "## B\n\nbody text")]


def test_chunks_respect_the_bound_and_count_exactly() -> None:
    counter = get_token_counter()
    doc = _big_document(random.Random(7), 120)
    chunks = chunk_document(doc, title="Big", max_tokens=120, overlap_tokens=20, counter=counter)
    assert len(chunks) > 10
    for chunk in chunks:
        assert chunk.token_count == counter.count(chunk.text)
        assert 0 < chunk.token_count <= 120


def test_consecutive_chunks_in_a_section_overlap() -> None:
    doc = "## Long\n\n" + _prose(random.Random(3), 80)
    chunks = chunk_document(doc, title="T", max_tokens=100, overlap_tokens=25)
    assert len(chunks) >= 4
    counter = get_token_counter()
    for previous, current in zip(chunks, chunks[1:]):
        shared = _longest_suffix_prefix(previous.text, current.text)
        assert shared, (previous.text[-80:], current.text[:80])
        assert counter.count(shared) <= 25
        assert len(shared) < len(current.text)  # each chunk brings new text


def test_text_without_any_break_is_cut_hard_within_the_bound() -> None:
    counter = get_token_counter()
    doc = "abcdefgh" * 3000 + " " + "word " * 600
    chunks = chunk_document(doc, title="T", max_tokens=64, overlap_tokens=8, counter=counter)
    assert all(counter.count(c.text) <= 64 for c in chunks)
    joined = "".join(c.text for c in chunks)
    assert joined.count("abcdefgh") >= 3000  # nothing lost (overlap may repeat some)


def test_chunking_work_grows_linearly_with_the_document() -> None:
    rng = random.Random(11)
    small, large = CountingCounter(), CountingCounter()
    small_doc, large_doc = _big_document(rng, 200), _big_document(rng, 1600)
    chunk_document(small_doc, title="S", counter=small)
    chunk_document(large_doc, title="L", counter=large)
    # Each character is counted a small constant number of times, however big the document.
    assert small.chars <= 4 * len(small_doc)
    assert large.chars <= 4 * len(large_doc)
    assert large.calls <= 10 * small.calls


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        chunk_document("text", title="t", max_tokens=4)
    with pytest.raises(ValueError):
        chunk_document("text", title="t", max_tokens=100, overlap_tokens=80)


def test_empty_text_gives_no_chunks() -> None:
    assert chunk_document("  \n\n ", title="t") == []
    assert isinstance(chunk_document("hello", title="t")[0], Chunk)


def _longest_suffix_prefix(left: str, right: str) -> str:
    for size in range(min(len(left), len(right)), 0, -1):
        if left.endswith(right[:size]):
            return right[:size]
    return ""
