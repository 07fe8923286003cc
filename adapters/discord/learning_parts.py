"""What a Discord adapter lends learning from channels — its history door, its readers' facts, its live events — built over its client and the bot-wide budget; and the CLI's history door over REST alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import discord

from adapters.base import AdapterPorts
from adapters.gate import Gate
from adapters.learning_feed import LearningFeed
from adapters.streaming import Clock
from core.config import Settings
from core.learning.ports import ChannelLearning

from .channel_facts import MEMBERS_CACHE_S, DiscordChannelFacts
from .channel_history import DiscordChannelHistory
from .learning_events import DiscordLearningEvents
from .settings import DiscordSettings
from .surface import PLATFORM
from .transport import DiscordBudgets
from .transport_directory import cli_pacing
from .transport_history import HistoryDoor, RestClient


def learning_port(ports: AdapterPorts) -> Callable[[], ChannelLearning | None]:
    """The engine's side (AdapterPorts.learning), or None where the process was built without it."""
    return lambda: getattr(ports, "learning", None)


@dataclass(frozen=True, kw_only=True)
class DiscordLearning:
    history: DiscordChannelHistory
    facts: DiscordChannelFacts
    events: DiscordLearningEvents


def learning_parts(
    *, settings: Settings, client: Callable[[], discord.Client], budgets: DiscordBudgets, clock: Clock, gate: Gate,
    ports: AdapterPorts,
) -> DiscordLearning:
    async def http() -> discord.http.HTTPClient:
        return client().http

    def me() -> int | None:
        user = client().user
        return user.id if user is not None else None

    door = HistoryDoor(http=http, budget=budgets.global_budget, clock=clock)
    facts = DiscordChannelFacts(client=client, door=door,
                                cache_s=float(getattr(settings, "learn_members_cache_s", MEMBERS_CACHE_S)))
    message_content = settings.platform_settings(DiscordSettings).message_content_intent
    return DiscordLearning(
        history=DiscordChannelHistory(door, me=me, message_content=message_content), facts=facts,
        events=DiscordLearningEvents(client=client, feed=LearningFeed(learning_port(ports), platform=PLATFORM), facts=facts, gate=gate,
                                     door=door),
    )


class CliChannelHistory(DiscordChannelHistory):
    """The CLI's history door (no gateway): discord.py's HTTP client over REST, logged in on the first read, its
    calls on a bot-wide budget of the command's own. `close` ends its session."""

    def __init__(self, rest: RestClient, *, message_content: bool) -> None:
        self._rest = rest
        self._user: int | None = None
        door = HistoryDoor(http=self._opened, budget=rest.budget, clock=rest.clock)
        super().__init__(door, me=lambda: self._user, message_content=message_content)

    async def _opened(self) -> discord.http.HTTPClient:
        http = await self._rest.opened()
        self._user = self._rest.user_id
        return http

    async def close(self) -> None:
        await self._rest.close()


def cli_channel_history(settings: Settings) -> CliChannelHistory | None:
    """Platform.channel_history: None where DISCORD_TOKEN is not set."""
    group = settings.platform_settings(DiscordSettings)
    if not group.token:
        return None
    budget, clock = cli_pacing(group)
    rest = RestClient(token=group.token, budget=budget, clock=clock)
    return CliChannelHistory(rest, message_content=group.message_content_intent)
