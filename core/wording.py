"""Every sentence the engine shows users, in one place so wording stays consistent."""

from __future__ import annotations

from datetime import datetime


def database_unavailable() -> str:
    return "I can't reach my database right now, so I can't answer. Please try again in a minute."


def unexpected_error() -> str:
    return "Something went wrong on my side while answering. Please try again in a moment."


def loop_limit_reached(rounds: int) -> str:
    return (
        f"I stopped after {rounds} rounds of tool calls without reaching an answer. "
        "Try asking a narrower question."
    )


def approval_not_found() -> str:
    return "This approval request no longer exists."


def approval_expired() -> str:
    return "This approval request has expired, so nothing was run. Ask again if you still need it."


def approval_already_handled(by: str | None) -> str:
    who = f" by {by}" if by else ""
    return f"This approval was already handled{who}."


def call_already_decided(decided_by: str) -> str:
    return f"That tool call was already decided by {decided_by}."


def decision_recorded(remaining: int) -> str:
    return f"Decision recorded; {remaining} more call{'s' if remaining != 1 else ''} still need a decision."


def tool_outcome_unknown() -> str:
    return "This tool call was already started before the bot restarted; its outcome is unknown. Do not retry it."


def unknown_agent_type(name: str, known: list[str]) -> str:
    return f"Unknown agent type {name!r}; use one of {', '.join(known)}."


def reminder_created(due: datetime) -> str:
    return f"Reminder set for {due.isoformat(timespec='minutes')}."
