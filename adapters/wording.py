"""Sentences every platform shows the same way, in Markdown; platforms only format them (mentions, bold)."""

from __future__ import annotations

from core import wording as engine_wording


def interrupted() -> str:
    return "⚠️ This answer was interrupted because the bot restarted; please ask again."


def failed(message: str) -> str:
    return f"⚠️ {message}"


def tool_running(tool: str) -> str:
    return f"_🔧 Running `{tool}`…_"


def waiting_for_approval() -> str:
    return "_⏸ Waiting for approval (see below)…_"


def approval_heading(who: str, count: int) -> str:
    """`who` is already formatted by the platform (a mention)."""
    calls = "this tool call" if count == 1 else f"these {count} tool calls"
    return f"🔐 **Approval needed** — {who} asked me to run {calls}."


def approved_by(actor: str) -> str:
    return f"✅ Approved by {actor}"


def rejected_by(actor: str) -> str:
    return f"❌ Rejected by {actor}"


def approval_expired() -> str:
    return f"⌛ {engine_wording.approval_expired()}"


def more_calls_hidden(count: int) -> str:
    return f"…and {count} more call{'s' if count != 1 else ''} (use Approve all or Reject all)."


def click_failed() -> str:
    return "Sorry, I couldn't record that click. Please try again in a moment."


def approval_not_shown() -> str:
    return "⚠️ I couldn't post the approval request, so nothing was run. Please ask again."


def shutting_down() -> str:
    return "The bot is restarting; please try again in a moment."


def not_enabled_here() -> str:
    return "relaybot is not enabled in this workspace."


def empty_question() -> str:
    return "Ask me something after the mention, e.g. “@relaybot what is our deploy process?”"


def sources_title() -> str:
    return "Sources"


def more_sources(count: int) -> str:
    return f"…and {count} more"


def default_thread_name() -> str:
    return "Answer"


def approval_footer(when: str) -> str:
    """`when` is the expiry as the platform shows times."""
    return f"Expires {when}. Approve or reject each call below."
