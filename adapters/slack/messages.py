"""Every sentence the Slack adapter shows users, in one place so wording stays consistent."""

from __future__ import annotations


def mention(user_id: str) -> str:
    return f"<@{user_id}>"


def interrupted() -> str:
    return "⚠️ Interrupted — the bot restarted; please ask again."


def failed(message: str) -> str:
    return f"⚠️ {message}"


def tool_running(tool: str) -> str:
    return f"_🔧 Running `{tool}`…_"


def waiting_for_approval() -> str:
    return "_⏸ Waiting for approval (see below)…_"


def approval_heading(requested_by: str, count: int) -> str:
    calls = "this tool call" if count == 1 else f"these {count} tool calls"
    return f"*Approval needed* — {mention(requested_by)} asked me to run {calls}."


def approved_by(actor: str) -> str:
    return f"✅ Approved by {actor}"


def rejected_by(actor: str) -> str:
    return f"❌ Rejected by {actor}"


def approval_expired() -> str:
    return "⌛ This approval expired, so nothing was run. Ask again if you still need it."


def more_calls_hidden(count: int) -> str:
    return f"…and {count} more call{'s' if count != 1 else ''} (use *Approve all* or *Reject all*)."


def sources_heading() -> str:
    return "*Sources*"


def click_failed() -> str:
    return "Sorry, I couldn't handle that click. Please try again in a moment."
