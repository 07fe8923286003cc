"""Slack formatting of the shared sentences: how people and times are written."""

from __future__ import annotations


def mention(user_id: str) -> str:
    return f"<@{user_id}>"


def time_at(unix_s: float, fallback: str) -> str:
    """A time each reader sees in their own time zone (Slack's date formatting), with plain text for old clients."""
    return f"<!date^{int(unix_s)}^{{date_short_pretty}} {{time}}|{fallback}>"
