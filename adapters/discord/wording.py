"""Sentences only the Discord adapter shows; the shared ones are in adapters/wording.py."""

from __future__ import annotations


def shutting_down() -> str:
    return "The bot is restarting; please try again in a moment."


def approval_header(requester_id: str) -> str:
    return f"🔐 **Approval needed** for <@{requester_id}>'s request"


def approval_footer(expires_at: float) -> str:
    return f"Expires <t:{int(expires_at)}:R>. Approve or reject each call below."


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
