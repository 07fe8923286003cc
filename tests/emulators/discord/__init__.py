"""A local Discord (REST + gateway) for end-to-end tests of the real discord.py client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tests.emulators.discord.emulator import DEFAULT_BOT_TOKEN, DiscordEmulator
from tests.emulators.discord.models import (
    GLOBAL_LIMIT_PER_S,
    Channel,
    GlobalLimitConfig,
    InteractionResponseRecord,
    MessageVersion,
    RateLimitConfig,
    RequestRecord,
    StoredMessage,
    UploadedFile,
)

__all__ = [
    "DEFAULT_BOT_TOKEN",
    "GLOBAL_LIMIT_PER_S",
    "Channel",
    "DiscordEmulator",
    "GlobalLimitConfig",
    "InteractionResponseRecord",
    "MessageVersion",
    "RateLimitConfig",
    "RequestRecord",
    "StoredMessage",
    "UploadedFile",
    "point_discord_py_at",
]


@contextmanager
def point_discord_py_at(emulator: DiscordEmulator) -> Iterator[None]:
    """Point discord.py's REST base and default gateway at the emulator, restoring them after."""
    import discord.gateway
    import discord.http
    import yarl

    old_base = discord.http.Route.BASE
    old_gateway = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    discord.http.Route.BASE = emulator.api_base
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(emulator.gateway_url)
    try:
        yield
    finally:
        discord.http.Route.BASE = old_base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = old_gateway
