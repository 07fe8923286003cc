"""Discord adapter: mentions, DMs, /ask and threads answered by streamed message edits."""

from __future__ import annotations

from .adapter import DiscordAdapter, DiscordTuning, apply_endpoints, check_discord

__all__ = ["DiscordAdapter", "DiscordTuning", "apply_endpoints", "check_discord"]
