"""Every sentence the Discord adapter shows users, in one place."""

from __future__ import annotations


def interrupted() -> str:
    return "_⚠️ This answer was interrupted because the bot restarted. Please ask again._"


def shutting_down() -> str:
    return "The bot is restarting; please try again in a moment."


def waiting_for_approval() -> str:
    return "_⏸ Waiting for approval (see below)._"


def approval_header(requester_id: str) -> str:
    return f"🔐 **Approval needed** for <@{requester_id}>'s request"


def approval_footer(expires_at: float) -> str:
    return f"Expires <t:{int(expires_at)}:R>. Approve or reject each call below."


def approved_by(name: str) -> str:
    return f"✅ Approved by {name}"


def rejected_by(name: str) -> str:
    return f"❌ Rejected by {name}"


def approval_expired() -> str:
    return "⌛ This approval request expired; nothing was run."


def decision_failed() -> str:
    return "Something went wrong while recording your decision. Please try again."


def tool_running(tool: str) -> str:
    return f"🔧 Running `{tool}`…"


def sources_title() -> str:
    return "Sources"


def more_sources(count: int) -> str:
    return f"…and {count} more"


def empty_question() -> str:
    return "Ask me something after the mention, e.g. “@relaybot what is our deploy process?”"


def default_thread_name() -> str:
    return "Answer"


def not_enabled_here() -> str:
    return "relaybot is not enabled in this server."
