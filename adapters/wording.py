"""Sentences every platform shows the same way (Markdown; each transport renders it)."""

from __future__ import annotations


def interrupted() -> str:
    return "⚠️ This answer was interrupted because the bot restarted; please ask again."


def failed(message: str) -> str:
    return f"⚠️ {message}"


def tool_running(tool: str) -> str:
    return f"_🔧 Running `{tool}`…_"


def waiting_for_approval() -> str:
    return "_⏸ Waiting for approval (see below)…_"


def approved_by(actor: str) -> str:
    return f"✅ Approved by {actor}"


def rejected_by(actor: str) -> str:
    return f"❌ Rejected by {actor}"


def approval_expired() -> str:
    return "⌛ This approval expired, so nothing was run. Ask again if you still need it."


def click_failed() -> str:
    return "Sorry, I couldn't record that click. Please try again in a moment."


def approval_not_shown() -> str:
    return "⚠️ I couldn't post the approval request, so nothing was run. Please ask again."
