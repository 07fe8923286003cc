"""Message building against DESIGN §2's budget rules, with exact token arithmetic."""

from __future__ import annotations

from typing import Any

import pytest

from core.agents.token_budget import (
    DEFAULT_REPLY_RESERVE_TOKENS,
    HistoryTurn,
    build_messages,
    complete_tool_rounds,
    plan_budget,
)
from core.tokens import TRUNCATION_MARKER, TokenCounter, get_token_counter

SYSTEM = "You are a test bot."


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return get_token_counter("test-model")


def turn(tag: str, tokens: int) -> HistoryTurn:
    return HistoryTurn(
        messages=({"role": "user", "content": f"q {tag}"}, {"role": "assistant", "content": f"a {tag}"}), tokens=tokens
    )


def test_the_budget_keeps_ten_percent_safety_and_the_reply_reserve_out() -> None:
    budget = plan_budget(context_limit=10_000, system_tokens=100, max_tokens=None)
    assert budget.safety_tokens == 1_000
    assert budget.reply_reserve == DEFAULT_REPLY_RESERVE_TOKENS == 1_024
    assert budget.available == 10_000 - 100 - 1_000 - 1_024 == 7_876
    assert budget.query_limit == int(7_876 * 0.8) == 6_300


def test_max_tokens_sets_the_reply_reserve_and_zero_means_the_default() -> None:
    assert plan_budget(context_limit=10_000, system_tokens=0, max_tokens=500).reply_reserve == 500
    assert plan_budget(context_limit=10_000, system_tokens=0, max_tokens=500).available == 10_000 - 1_000 - 500
    assert plan_budget(context_limit=10_000, system_tokens=0, max_tokens=0).reply_reserve == 1_024
    # A max_tokens larger than a quarter of the context cannot starve the prompt.
    assert plan_budget(context_limit=10_000, system_tokens=0, max_tokens=9_000).reply_reserve == 2_500
    assert plan_budget(context_limit=1_000, system_tokens=2_000, max_tokens=None).available == 0


def test_history_fills_newest_first_and_stops_at_the_first_turn_that_does_not_fit(counter: TokenCounter) -> None:
    system_tokens = counter.count_message({"role": "system", "content": SYSTEM})
    query_tokens = counter.count_message({"role": "user", "content": "the question"})
    context = 20_000
    available = context - system_tokens - 2_000 - 1_024
    left = available - query_tokens
    # Newest two fit exactly; the third does not by one token; the oldest would fit but must not be used.
    history = [turn("oldest", 1), turn("third", 2), turn("second", left - 1_000), turn("newest", 1_000 - 1)]
    assert left - history[3].tokens - history[2].tokens == 1 < history[1].tokens
    built = build_messages(
        system_prompt=SYSTEM, query="the question", history=history, counter=counter, context_limit=context, max_tokens=None
    )
    assert built.budget.system_tokens == system_tokens
    assert built.budget.available == available
    assert built.query_tokens == query_tokens and not built.query_truncated
    assert built.history_turns == 2
    assert [m["content"] for m in built.messages] == [SYSTEM, "q second", "a second", "q newest", "a newest", "the question"]


def test_a_turn_that_fits_to_the_token_is_kept(counter: TokenCounter) -> None:
    built = build_messages(
        system_prompt=SYSTEM, query="hi", history=[turn("a", 1)], counter=counter, context_limit=20_000, max_tokens=None
    )
    left = built.budget.available - built.query_tokens
    exact = build_messages(
        system_prompt=SYSTEM, query="hi", history=[turn("a", left)], counter=counter, context_limit=20_000, max_tokens=None
    )
    over = build_messages(
        system_prompt=SYSTEM, query="hi", history=[turn("a", left + 1)], counter=counter, context_limit=20_000, max_tokens=None
    )
    assert exact.history_turns == 1 and over.history_turns == 0


def test_a_long_query_is_middle_truncated_to_eighty_percent_and_history_gets_the_rest(counter: TokenCounter) -> None:
    words = " ".join(f"w{index}" for index in range(6_000))
    query = "HEAD-MARK " + words + " TAIL-MARK"
    context = 4_000
    built = build_messages(
        system_prompt=SYSTEM, query=query, history=[turn("old", 50), turn("new", 100)], counter=counter,
        context_limit=context, max_tokens=None,
    )
    budget = built.budget
    # Safety is 10% (400); the 1,024 default reserve is capped at a quarter of the context (1,000).
    assert budget.available == context - budget.system_tokens - 400 - 1_000
    assert budget.query_limit == int(budget.available * 0.8)
    assert built.query_truncated
    assert budget.query_limit - 8 <= built.query_tokens <= budget.query_limit
    content = built.user_message["content"]
    assert built.query_tokens == counter.count_message(built.user_message)
    assert content.startswith("HEAD-MARK") and content.endswith("TAIL-MARK") and TRUNCATION_MARKER in content
    assert budget.available - built.query_tokens >= 150
    assert built.history_turns == 2


def test_complete_tool_rounds_never_leaves_a_tool_calls_message_without_all_results() -> None:
    def calls(*ids: str) -> list[dict[str, Any]]:
        return [{"id": i, "type": "function", "function": {"name": "t", "arguments": "{}"}} for i in ids]

    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": calls("a", "b")},
        {"role": "tool", "tool_call_id": "a", "content": "ra"},
        {"role": "tool", "tool_call_id": "b", "content": "rb"},
        {"role": "assistant", "content": "Checking", "tool_calls": calls("c", "d")},
        {"role": "tool", "tool_call_id": "c", "content": "rc"},
        {"role": "assistant", "content": None, "tool_calls": calls("e")},
        {"role": "tool", "tool_call_id": "zz", "content": "orphan"},
        {"role": "assistant", "content": "answer"},
    ]
    kept = complete_tool_rounds(messages)
    assert kept == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": calls("a", "b")},
        {"role": "tool", "tool_call_id": "a", "content": "ra"},
        {"role": "tool", "tool_call_id": "b", "content": "rb"},
        {"role": "assistant", "content": "Checking"},
        {"role": "assistant", "content": "answer"},
    ]
