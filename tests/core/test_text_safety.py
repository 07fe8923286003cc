"""core.text_safety: what makes outside text storable, and the question cap (issue 21)."""

from __future__ import annotations

import dataclasses

from core.requests import Actor, ConversationKey, PriorMessage, Request
from core.text_safety import QUESTION_MAX_CHARS, capped_question, storable, storable_json


def test_storable_drops_nul_and_replaces_each_lone_surrogate() -> None:
    assert storable("a\x00b") == "ab"
    assert storable("\ud800x\udfff\ud83d") == "\ufffdx\ufffd\ufffd"
    assert storable("pair \ud83d\ude00") == "pair \U0001f600"  # two halves written apart are one character
    plain = "ordinary text, é and 🙂"
    assert storable(plain) is plain
    storable(storable("\ud800")).encode("utf-8")  # UTF-8 encodes it: psycopg will


def test_storable_json_cleans_every_string_and_key_at_any_depth() -> None:
    assert storable_json({"k\x00": ["v\ud800", {"n": 1, "t": True, "z": None}]}) == {"k": ["v\ufffd", {"n": 1, "t": True, "z": None}]}
    deep: dict[str, object] = {"type": "string\x00"}
    for _ in range(5_000):  # deeper than Python's recursion limit
        deep = {"properties": {"x": deep}}
    cleaned = storable_json(deep)
    for _ in range(5_000):
        cleaned = cleaned["properties"]["x"]
    assert cleaned == {"type": "string"}


def test_a_question_is_capped_once_with_a_sentence() -> None:
    long = "x" * (QUESTION_MAX_CHARS + 5)
    cut = capped_question(long)
    assert cut.startswith("x" * QUESTION_MAX_CHARS) and not cut.startswith("x" * (QUESTION_MAX_CHARS + 1))
    assert "40,005 characters long" in cut
    assert capped_question(cut) == cut
    assert capped_question("short\x00") == "short"


def test_a_request_cleans_what_a_platform_hands_it() -> None:
    request = Request(
        question="q\x00", conversation=ConversationKey(platform="p", workspace="w", channel="c"),
        user=Actor(id="U", name="Ada\ud800"),
        thread_context=(PriorMessage(author="Bo\x00b", text="earlier\x00 \udc00"),),
    )
    assert request.question == "q" and request.user.name == "Ada\ufffd"
    assert request.thread_context[0].author == "Bob" and request.thread_context[0].text == "earlier \ufffd"
    assert dataclasses.replace(request, agent_type="classic") == dataclasses.replace(request, agent_type="classic")
