"""Splitting never cuts a user-perceived character: ZWJ sequences, skin tones, flags, variation selectors, accents."""

from __future__ import annotations

import pytest
import regex

from adapters.streaming.splitter import grapheme_start, split_parts

FAMILY = "👨‍👩‍👧‍👦"  # four people joined by ZWJs: 7 code points, one character
CHARACTERS = {
    "zwj family": FAMILY,
    "zwj with skin tones": "👩🏽‍🤝‍👨🏻",
    "skin tone": "👍🏽",
    "flag pair": "🇫🇷",
    "variation selector": "❤️",
    "keycap": "1️⃣",
    "combining marks": "e\u0301\u0323",
    "hangul jamo": "\u1100\u1161\u11a8",
}


def _boundaries(text: str) -> set[int]:
    return {match.end() for match in regex.finditer(r"\X", text)} | {0}


@pytest.mark.parametrize("name", list(CHARACTERS))
@pytest.mark.parametrize("max_chars", [40, 41, 47, 50, 53])
def test_a_part_ends_between_characters_never_inside_one(name: str, max_chars: int) -> None:
    text = CHARACTERS[name] * 60
    parts = split_parts(text, max_chars)
    assert len(parts) > 1
    assert "".join(part.body for part in parts) == text
    cuts = [sum(len(part.body) for part in parts[: index + 1]) for index in range(len(parts))]
    assert set(cuts) <= _boundaries(text), f"{name} cut inside at {sorted(set(cuts) - _boundaries(text))}"
    assert all(len(part.text) <= max_chars for part in parts)


def test_prose_with_emoji_between_words_still_cuts_at_spaces() -> None:
    text = " ".join(f"word{index} {FAMILY}" for index in range(80))
    parts = split_parts(text, 60)
    assert "".join(part.body for part in parts) == text
    assert all(part.body.endswith(" ") for part in parts[:-1])


def test_a_space_carrying_a_combining_mark_is_not_a_cut() -> None:
    # " \u0301" is one character (a spacing accent): cutting after the space would strand the accent.
    text = "x" * 45 + " \u0301" + "y" * 60
    parts = split_parts(text, 50)
    first_cut = len(parts[0].body)
    assert first_cut in _boundaries(text) and "".join(part.body for part in parts) == text


def test_one_character_longer_than_a_part_is_cut_where_it_must_be() -> None:
    text = "e" + "\u0301" * 100  # one grapheme cluster of 101 code points
    parts = split_parts(text, 40)
    assert "".join(part.body for part in parts) == text and all(len(part.text) <= 40 for part in parts)


def test_grapheme_start_finds_the_character_holding_an_index() -> None:
    text = "a" + FAMILY + "b"
    assert [grapheme_start(text, index) for index in range(len(text) + 1)] == [0, 1, 1, 1, 1, 1, 1, 1, 8, 9]
