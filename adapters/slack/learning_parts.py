"""Slack's side of learning from channels, built once per adapter: its people, history door, facts, live events and their listeners."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext

from core.config import Settings
from core.learning.ports import ChannelLearning

from .channel_facts import DEFAULT_CACHE_S, SlackChannelFacts
from .channel_history import SlackChannelHistory
from .channel_people import SlackPeople
from .learning_events import CHANNEL_EVENTS, SlackLearningEvents
from .reader import BotIdentity
from .transport import SlackWeb


class SlackLearningParts:
    """One SlackPeople shared by the history door (authors' names) and the facts (guests), over the adapter's door."""

    def __init__(self, *, settings: Settings, web: SlackWeb, learning: ChannelLearning | None) -> None:
        self.people = SlackPeople(web)
        self.history = SlackChannelHistory(web, self.people)
        self.facts = SlackChannelFacts(web, self.people, cache_s=float(getattr(settings, "learn_members_cache_s",
                                                                                DEFAULT_CACHE_S)))
        self.learning = learning
        self.events = SlackLearningEvents(history=self.history, facts=self.facts, learning=learning)

    def register(self, app: AsyncApp) -> None:
        """The channel events' listeners (message events reach on_message through the adapter's message listener)."""
        for name in sorted(CHANNEL_EVENTS):
            app.event(name)(self._on_channel_event)

    def on_message(self, body: dict[str, Any], event: dict[str, Any], bot: BotIdentity) -> None:
        self.events.on_message(body, event, bot)

    async def close(self) -> None:
        await self.events.close()
        await self.facts.close()

    async def _on_channel_event(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        self.events.on_channel_event(body, event, BotIdentity(user_id=context.bot_user_id or "", bot_id=context.bot_id or ""))
