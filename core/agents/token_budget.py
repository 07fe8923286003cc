"""Token-budgeted message building: system, history newest-first, and the (truncated) query."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from core.tokens import TokenCounter

SAFETY_FRACTION = 0.10
QUERY_FRACTION = 0.80
DEFAULT_REPLY_RESERVE_TOKENS = 1024
# The reply reserve never takes more than this share of the context, whatever max_tokens says.
MAX_REPLY_RESERVE_FRACTION = 0.25


@dataclass(frozen=True, kw_only=True)
class Budget:
    """How the context window is split for one model call."""

    context_limit: int
    system_tokens: int
    safety_tokens: int
    reply_reserve: int
    available: int  # for query + history
    query_limit: int


@dataclass(frozen=True, kw_only=True)
class HistoryTurn:
    """One past exchange as chat messages, with its cached token cost."""

    messages: tuple[dict[str, Any], ...]
    tokens: int


@dataclass(frozen=True, kw_only=True)
class BuiltMessages:
    messages: list[dict[str, Any]]
    budget: Budget
    query_tokens: int
    history_turns: int
    query_truncated: bool

    @property
    def user_message(self) -> dict[str, Any]:
        return self.messages[-1]


def plan_budget(*, context_limit: int, system_tokens: int, max_tokens: int | None) -> Budget:
    """available = context − system − 10% safety − reply reserve; the query may use 80% of it."""
    safety = int(context_limit * SAFETY_FRACTION)
    wanted_reply = max_tokens if max_tokens and max_tokens > 0 else DEFAULT_REPLY_RESERVE_TOKENS
    reply_reserve = min(wanted_reply, int(context_limit * MAX_REPLY_RESERVE_FRACTION))
    available = max(0, context_limit - system_tokens - safety - reply_reserve)
    return Budget(
        context_limit=context_limit,
        system_tokens=system_tokens,
        safety_tokens=safety,
        reply_reserve=reply_reserve,
        available=available,
        query_limit=int(available * QUERY_FRACTION),
    )


def build_messages(
    *,
    system_prompt: str,
    query: str,
    history: Sequence[HistoryTurn],
    counter: TokenCounter,
    context_limit: int,
    max_tokens: int | None,
    extra_parts: Sequence[dict[str, Any]] = (),
) -> BuiltMessages:
    """Messages for one call: the query gets ≤ 80% of what is left, history the rest, newest first."""
    system_message = {"role": "system", "content": system_prompt}
    budget = plan_budget(
        context_limit=context_limit, system_tokens=counter.count_message(system_message), max_tokens=max_tokens
    )
    user_message = _user_message(query, extra_parts)
    query_tokens = counter.count_message(user_message)
    truncated = False
    if query_tokens > budget.query_limit:
        overhead = query_tokens - counter.count(query)
        query = counter.truncate_middle(query, max(0, budget.query_limit - overhead))
        user_message = _user_message(query, extra_parts)
        query_tokens = counter.count_message(user_message)
        truncated = True
    remaining = budget.available - query_tokens
    kept: list[HistoryTurn] = []
    for turn in reversed(history):
        if turn.tokens > remaining:
            break
        kept.append(turn)
        remaining -= turn.tokens
    messages = [system_message]
    for turn in reversed(kept):
        messages.extend(turn.messages)
    messages.append(user_message)
    return BuiltMessages(
        messages=messages, budget=budget, query_tokens=query_tokens, history_turns=len(kept), query_truncated=truncated
    )


def _user_message(query: str, extra_parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    if not extra_parts:
        return {"role": "user", "content": query}
    return {"role": "user", "content": [{"type": "text", "text": query}, *extra_parts]}


def complete_tool_rounds(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop any assistant tool_calls message that lacks a result for a call, and orphan results.

    A provider answers 400 to an assistant `tool_calls` message without all its results, so
    history must never hold one, whatever was stored.
    """
    answered = {message.get("tool_call_id") for message in messages if message.get("role") == "tool"}
    kept: list[dict[str, Any]] = []
    valid_ids: set[str] = set()
    for message in messages:
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and calls:
            ids = {call["id"] for call in calls}
            if ids <= answered:
                valid_ids |= ids
                kept.append(message)
            elif message.get("content"):
                kept.append({"role": "assistant", "content": message["content"]})
            continue
        if message.get("role") == "tool" and message.get("tool_call_id") not in valid_ids:
            continue
        kept.append(message)
    return kept
