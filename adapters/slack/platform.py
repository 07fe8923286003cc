"""Slack's entry in the platform table: its settings group, adapter factory, doctor line, scope word and emulator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from collections.abc import Awaitable, Callable

from adapters.platform import InstallCheck, Platform
from core.config import Settings

from .settings import SlackSettings

if TYPE_CHECKING:
    from core.learning.ports import ChannelHistory
    from core.ports import Installs
    from adapters.base import AdapterPorts, PlatformAdapter
    from adapters.http.server import HttpServer
    from core.engine import Engine
    from core.names import NameDirectory


def build_adapter(*, settings: Settings, engine: Engine, ports: AdapterPorts, http: HttpServer) -> PlatformAdapter:
    # Imported here: `relaybot channels` and `doctor` read the table without loading slack-bolt.
    from .adapter import SlackAdapter
    from .oauth import SlackUninstalls, add_to_slack, register_uninstall

    # Several workspaces ("Add to Slack"): every call with its team's stored token, the install pages, and the
    # uninstall events deleting a team's tokens. None: SLACK_BOT_TOKEN for every call, as before.
    installations = add_to_slack(settings, ports.installs, http.app if http is not None else None)
    if installations is None:
        return SlackAdapter(settings=settings, engine=engine, ports=ports, http=http)
    adapter = SlackAdapter(settings=settings, engine=engine, ports=ports, http=http, tokens=installations,
                           installation_store=installations)
    if http is not None:
        # A team whose token refresh fails is shown in /readyz, and the other teams stay served.
        http.add_readiness_notes(SlackSettings.platform, installations.refresh_failures)
    # What an uninstall drops, and purges with UNINSTALL_DATA=purge.
    adapter.uninstalls = SlackUninstalls(forget=ports.forget_team, purge=settings.uninstall_data == "purge")
    register_uninstall(adapter.app, installations, adapter.uninstalls)
    return adapter


async def doctor_line(settings: Settings) -> str:
    """Is Slack configured, is the bot token accepted, and can `relaybot run` take events with what is set?"""
    slack = settings.platform_settings(SlackSettings)
    if slack.multi_workspace:
        from .oauth import doctor_line as several_workspaces

        return several_workspaces(settings)
    if not slack.bot_token:
        return "not configured (set SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET or SLACK_APP_TOKEN)"
    from .adapter import check_slack

    line = " ".join((await check_slack(settings)).split())
    if line.startswith("ok — ") and not (slack.app_token or slack.signing_secret):
        # `relaybot run` refuses this configuration, so doctor must not call it healthy.
        return (
            "FAILED — set SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode); "
            f"the bot token itself is accepted ({line.removeprefix('ok — ')})"
        )
    return line


def install_checks(settings: Settings) -> Callable[[Installs], Awaitable[list[InstallCheck]]] | None:
    """With several workspaces, each stored install's token tried (auth.test) for `relaybot doctor`; None with
    SLACK_BOT_TOKEN alone (the doctor line has tried it)."""
    if not settings.platform_settings(SlackSettings).multi_workspace:
        return None

    async def check(installs: Installs) -> list[InstallCheck]:
        from .oauth import check_installs  # slack-bolt only when there are installs to ask about

        return await check_installs(settings, installs)

    return check


def build_names(settings: Settings) -> NameDirectory | None:
    from .names import slack_names  # slack_sdk only when a command reads names

    return slack_names(settings)


def build_channel_history(settings: Settings) -> ChannelHistory | None:
    from .channel_history import cli_channel_history  # slack_sdk only when a command reads a channel

    return cli_channel_history(settings)


SLACK = Platform(
    name=SlackSettings.platform, settings=SlackSettings, adapter=build_adapter, doctor=doctor_line,
    workspace_word="TEAM", emulator="tests.emulators.slack:SlackEmulator", names=build_names,
    install_checks=install_checks, channel_history=build_channel_history,
)
