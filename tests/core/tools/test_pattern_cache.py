"""RE2 programs kept compiled are bounded (issue 21, memory): a client sending new patterns with every request cannot
make the process keep them all, each holding up to RE2_MAX_MEM_BYTES once matched."""

from __future__ import annotations

from core.tools import patterns


def test_compiled_programs_are_kept_up_to_the_cap_and_an_evicted_one_still_matches() -> None:
    patterns._program.cache_clear()
    text = "ab" * 5_000
    hostile = [f"(x{index}|[a-z]{{1,20}}b)+[0-9]*" for index in range(1_000)]
    assert all(patterns.search(pattern, text) for pattern in hostile)
    assert patterns._program.cache_info().currsize <= patterns.PROGRAM_CACHE_SIZE <= 512
    # The first ones were dropped to make room; compiled again, they answer the same.
    assert patterns.search(hostile[0], text) and not patterns.search(hostile[0], "zzz")
    assert patterns.refusal("(?=a)b") != ""
