"""A platform as one entry of bot/platforms.py's table: its settings, adapter factory, doctor line, CLI scope and emulator."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from core.config import Settings
from core.platform_settings import PlatformSettings

if TYPE_CHECKING:
    from adapters.base import AdapterPorts, PlatformAdapter
    from adapters.http.server import HttpServer
    from core.engine import Engine
    from core.learning.ports import ChannelHistory
    from core.names import NameDirectory
    from core.ports import Installs


class Lifecycle(Protocol):
    """What the runtime starts after the HTTP server and stops before the database closes: each platform
    adapter (adapters/base.py PlatformAdapter) and the HTTP API."""

    async def start(self) -> None: ...

    async def stop_accepting(self) -> None: ...

    async def close(self) -> None: ...


class AdapterFactory(Protocol):
    """Builds a platform's adapter before the HTTP server starts (a platform may add a route to it)."""

    def __call__(self, *, settings: Settings, engine: Engine, ports: AdapterPorts, http: HttpServer) -> PlatformAdapter: ...


@dataclass(frozen=True, kw_only=True)
class InstallCheck:
    """One stored install asked about by `relaybot doctor` (and `relaybot teams check`): its label and line."""

    label: str  # the install: a team id, `(org-wide) of E1`
    ok: bool
    line: str  # "ok — …" or "FAILED — …"


# The check of each stored install this configuration serves (None where it stores none: one bot token).
InstallChecks = Callable[[Settings], "Callable[[Installs], Awaitable[list[InstallCheck]]] | None"]


@dataclass(frozen=True, kw_only=True)
class Platform:
    """Everything the composition root, `relaybot doctor` and `relaybot channels` know of one platform.

    Its defaults for every channel (whether thread follow-ups need a mention) are its settings group's
    `defaults()`: core/channels.py reads them from the settings it is given, never from this table.
    """

    name: str  # ConversationKey.platform, and the first word of a channels-CLI scope
    settings: type[PlatformSettings]  # its group: fields read from <ENV_PREFIX><FIELD> (e.g. SLACK_BOT_TOKEN)
    adapter: AdapterFactory  # called when the settings say it is configured
    doctor: Callable[[Settings], Awaitable[str]]  # one line: "ok — …", "not configured …" or "FAILED — …"
    workspace_word: str  # what a scope calls a workspace: TEAM (Slack), GUILD (Discord)
    # The workspace its DMs are filed under when a DM belongs to none (Discord's "@dm"); None: the DM's own.
    dm_workspace: str | None = None
    emulator: str  # "module:Class" of the loopback server its tests run the real client library against
    # The CLI's names (core/names.py): its directory over its own door, None where it is not configured.
    names: Callable[[Settings], NameDirectory | None] | None = None
    # The CLI's door to a channel's info and history when no adapter runs (`relaybot sources add-channel`), as
    # `names` is (its `close()`, if it has one, is awaited after the command); None where the platform is not configured.
    channel_history: Callable[[Settings], ChannelHistory | None] | None = None
    # `relaybot doctor`'s line per stored install (several workspaces installed through the platform's OAuth).
    install_checks: InstallChecks | None = None

    def configured(self, settings: Settings) -> bool:
        """Whether this process serves the platform (its credentials are set)."""
        return settings.platform_settings(self.settings).configured

    @property
    def channel_scope(self) -> str:
        return f"{self.name}:{self.workspace_word}:CHANNEL"

    @property
    def workspace_scope(self) -> str:
        return f"{self.name}:{self.workspace_word}"
