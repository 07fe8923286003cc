"""Slack adapter: slack-bolt AsyncApp → engine; streamed answers, approval buttons, sources."""

from __future__ import annotations

from .adapter import SlackAdapter, check_slack
from .notifier import SlackNotifier

__all__ = ["SlackAdapter", "SlackNotifier", "check_slack"]
