"""Slack adapter: slack-bolt AsyncApp → engine; streamed answers, approval buttons, sources."""

from __future__ import annotations

from typing import Any

from .platform import SLACK
from .settings import SlackSettings

__all__ = ["SLACK", "SlackAdapter", "SlackNotifier", "SlackSettings", "check_slack"]


def __getattr__(name: str) -> Any:
    # The adapter's modules load on first use: the platform table is read by commands that never connect.
    if name in ("SlackAdapter", "check_slack"):
        from . import adapter

        return getattr(adapter, name)
    if name == "SlackNotifier":
        from .notifier import SlackNotifier

        return SlackNotifier
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
