"""The one ambiguity rule of core/names.py: exactly one channel or person answers to a name, else it is refused."""

from __future__ import annotations

import pytest

from core.names import AmbiguousName, NameNotFound, Named, is_name, pick

PEOPLE = [
    Named(id="U1", name="alex", also=("Alex Smith", "asmith")),
    Named(id="U2", name="alex", also=("Alex Jones",)),
    Named(id="U3", name="Sam", also=("Sam Reed",)),
]


def test_a_name_is_matched_without_case_on_any_of_its_names_and_its_sigil_is_optional() -> None:
    assert pick(PEOPLE, "@sam", kind="user", where="slack:T1").id == "U3"
    assert pick(PEOPLE, "SAM REED", kind="user", where="slack:T1").id == "U3"
    assert pick(PEOPLE, "@ASmith", kind="user", where="slack:T1").id == "U1"


def test_two_people_answering_to_one_name_are_both_listed_with_their_ids_and_neither_is_picked() -> None:
    with pytest.raises(AmbiguousName) as refused:
        pick(PEOPLE, "@alex", kind="user", where="slack:T1")
    assert {c.id for c in refused.value.candidates} == {"U1", "U2"}
    assert "alex (U1, Alex Smith), alex (U2, Alex Jones)" in str(refused.value)


def test_an_unknown_name_says_where_it_was_looked_for() -> None:
    with pytest.raises(NameNotFound, match=r"no channel in discord:42 is called #nope"):
        pick([Named(id="1", name="help")], "#nope", kind="channel", where="discord:42")


def test_many_candidates_are_cut_and_counted() -> None:
    twins = [Named(id=f"C{n}", name="help") for n in range(15)]
    with pytest.raises(AmbiguousName, match=r"any of 15 channels .* and 5 more; write the id"):
        pick(twins, "#help", kind="channel", where="slack:T1")


def test_ids_are_not_names() -> None:
    assert is_name("#help", "channel") and is_name(" @alex", "user")
    assert not is_name("C0123", "channel") and not is_name("U1", "user") and not is_name("@alex", "channel")
