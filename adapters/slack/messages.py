"""Every sentence the Slack adapter shows users, in one place so wording stays consistent."""

from __future__ import annotations


def mention(user_id: str) -> str:
    return f"<@{user_id}>"


def approval_heading(requested_by: str, count: int) -> str:
    calls = "this tool call" if count == 1 else f"these {count} tool calls"
    return f"*Approval needed* — {mention(requested_by)} asked me to run {calls}."


def more_calls_hidden(count: int) -> str:
    return f"…and {count} more call{'s' if count != 1 else ''} (use *Approve all* or *Reject all*)."


def sources_heading() -> str:
    return "*Sources*"
