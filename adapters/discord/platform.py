"""Discord's entry in the platform table: its settings group, adapter factory, doctor line, scope word and emulator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.platform import Platform
from core.config import Settings

from .settings import DiscordSettings

if TYPE_CHECKING:
    from adapters.base import AdapterPorts, PlatformAdapter
    from adapters.http.server import HttpServer
    from core.engine import Engine
    from core.learning.ports import ChannelHistory
    from core.names import NameDirectory

# Discord DMs belong to no guild; inbound files them under this workspace (adapters/discord/inbound.py's DM_WORKSPACE).
DM_WORKSPACE = "@dm"


def build_adapter(*, settings: Settings, engine: Engine, ports: AdapterPorts, http: HttpServer) -> PlatformAdapter:
    # Imported here: `relaybot channels` and `doctor` read the table without loading discord.py.
    from .adapter import DiscordAdapter

    return DiscordAdapter(settings=settings, engine=engine, ports=ports)


async def doctor_line(settings: Settings) -> str:
    if not settings.platform_settings(DiscordSettings).token:
        return "not configured (set DISCORD_TOKEN)"
    from .install import check_discord  # the token checked, and the install link printed

    return await check_discord(settings)


def build_names(settings: Settings) -> NameDirectory | None:
    from .names import discord_names  # discord.py only when a command reads names

    return discord_names(settings, dm_workspace=DM_WORKSPACE)


def build_channel_history(settings: Settings) -> ChannelHistory | None:
    from .learning_parts import cli_channel_history  # discord.py only when a command reads a channel

    return cli_channel_history(settings)


DISCORD = Platform(
    name=DiscordSettings.platform, settings=DiscordSettings, adapter=build_adapter, doctor=doctor_line,
    workspace_word="GUILD", dm_workspace=DM_WORKSPACE, emulator="tests.emulators.discord:DiscordEmulator",
    names=build_names, channel_history=build_channel_history,
)
