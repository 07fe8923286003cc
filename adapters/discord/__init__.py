"""Discord adapter: mentions, DMs, /ask and threads answered by streamed message edits."""

from __future__ import annotations

from typing import Any

from .platform import DISCORD
from .settings import DiscordSettings

__all__ = ["DISCORD", "DiscordAdapter", "DiscordSettings", "DiscordTuning", "apply_endpoints", "check_discord"]


def __getattr__(name: str) -> Any:
    # The adapter's modules load on first use: the platform table is read by commands that never connect.
    if name in ("DiscordAdapter", "DiscordTuning", "apply_endpoints"):
        from . import adapter

        return getattr(adapter, name)
    if name == "check_discord":
        from .install import check_discord

        return check_discord
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
