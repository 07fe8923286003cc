"""Citations in a finished answer: numbers of no source removed, code and links untouched, cited sources by number."""

from __future__ import annotations

import pytest

from core.citations import cite
from core.events import SourceItem

SIX = tuple(SourceItem(title=f"Doc {n}", uri=f"https://wiki.example/{n}", text=f"passage {n}") for n in range(1, 7))


def test_the_acceptance_answer_loses_its_ninth_citation_and_cites_one_two_and_four() -> None:
    cited = cite("Deploys run on Tuesdays [2], [9] and need a second reviewer [1][4].", SIX)
    assert cited.text == "Deploys run on Tuesdays [2] and need a second reviewer [1][4]."
    assert [(c.number, c.item.title) for c in cited.citations] == [(1, "Doc 1"), (2, "Doc 2"), (4, "Doc 4")]
    assert cited.removed == (9,)


@pytest.mark.parametrize(
    ("text", "cleaned", "numbers"),
    [
        ("Paris [9].", "Paris.", []),
        ("Paris [9] is big.", "Paris is big.", []),
        ("[9] Paris", "Paris", []),
        ("Line one\n[9] Paris", "Line one\nParis", []),
        ("Paris ([9]) is big.", "Paris is big.", []),
        ("Paris[9].", "Paris.", []),
        ("Both [1, 9] agree.", "Both [1] agree.", [1]),
        ("Both [9; 3] agree.", "Both [3] agree.", [3]),
        ("None [9, 12] agree.", "None agree.", []),
        ("Runs [1][9][4].", "Runs [1][4].", [1, 4]),
        ("Footnotes[^9] and[^2].", "Footnotes and[^2].", [2]),
        ("Zero [0] is no source.", "Zero is no source.", []),
        ("a [1], [9], [2]", "a [1], [2]", [1, 2]),
        ("Repeated [3] and [3].", "Repeated [3] and [3].", [3]),
    ],
)
def test_forms_of_citation(text: str, cleaned: str, numbers: list[int]) -> None:
    cited = cite(text, SIX)
    assert cited.text == cleaned
    assert [c.number for c in cited.citations] == numbers


@pytest.mark.parametrize(
    "text",
    [
        "Index it with `items[9]`.",
        "Use ``a[9]`` there.",
        "```python\nvalue = items[9]\n```",
        "~~~\n[9]\n~~~",
        "```\nunclosed [9]",
        "A link [9](https://example.com/9) stays.",
        "A reference link [the guide][9] stays.\n\n[9]: https://example.com/guide",
        "The page https://example.com/a[9] stays.",
        "Escaped \\[9] stays.",
        "In [2024] it changed.",
    ],
)
def test_code_links_and_lookalikes_are_left_alone(text: str) -> None:
    cited = cite(text, SIX)
    assert cited.text == text and cited.removed == ()


def test_code_after_a_closed_block_does_not_hide_a_citation() -> None:
    text = "```\nx[9]\n```\nSee [9] and `y[9]` [2]."
    cited = cite(text, SIX)
    assert cited.text == "```\nx[9]\n```\nSee and `y[9]` [2]."
    assert [c.number for c in cited.citations] == [2]


def test_without_sources_every_citation_goes() -> None:
    cited = cite("I think [1] says so.", ())
    assert cited.text == "I think says so." and cited.citations == () and cited.removed == (1,)


def test_an_answer_that_cites_nothing_cites_no_source() -> None:
    cited = cite("Plain answer.", SIX)
    assert cited.text == "Plain answer." and cited.citations == () and cited.removed == ()


def test_cleaning_twice_changes_nothing_more() -> None:
    once = cite("See [2], [9] and [1][4].", SIX)
    twice = cite(once.text, SIX)
    assert twice.text == once.text and twice.citations == once.citations and twice.removed == ()
