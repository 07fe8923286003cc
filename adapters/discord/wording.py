"""Discord formatting of the shared sentences of adapters/wording.py: how people and times are written."""

from __future__ import annotations


def mention(user_id: str) -> str:
    # Shown with NO_PINGS everywhere except reminders, so naming someone never notifies them by accident.
    return f"<@{user_id}>"


def time_at(unix_s: float) -> str:
    """A relative time ("in 15 minutes") that Discord renders in each reader's locale and keeps current."""
    return f"<t:{int(unix_s)}:R>"
