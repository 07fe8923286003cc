"""The discord.py client: intents, the /ask command tree and the approval buttons (setup_hook)."""

from __future__ import annotations

import logging

import discord
from discord import app_commands

from .approvals import DecisionButton
from .clicks import ClickHandler
from .handlers import Handlers

log = logging.getLogger(__name__)

QUESTION_MAX_CHARS = 4_000


def intents_for(*, message_content: bool) -> discord.Intents:
    intents = discord.Intents.default()
    # Privileged: without it Discord blanks guild messages that do not mention the bot.
    intents.message_content = message_content
    return intents


class RelayClient(discord.Client):
    """Routes messages to Handlers and clicks to the ClickHandler; nothing else lives here."""

    def __init__(
        self, *, handlers: Handlers, clicks: ClickHandler, message_content: bool, guild_ready_timeout_s: float
    ) -> None:
        super().__init__(
            intents=intents_for(message_content=message_content),
            allowed_mentions=discord.AllowedMentions.none(),
            guild_ready_timeout=guild_ready_timeout_s,
        )
        self.handlers = handlers
        self.clicks = clicks
        self.tree = app_commands.CommandTree(self)

        @self.tree.command(name="ask", description="Ask relaybot a question")
        @app_commands.describe(question="What do you want to know?")
        async def ask(interaction: discord.Interaction, question: app_commands.Range[str, 1, QUESTION_MAX_CHARS]) -> None:
            await self.handlers.on_ask(interaction, question)

    async def setup_hook(self) -> None:
        # Registered at every start, so buttons posted before a restart still work.
        self.add_dynamic_items(DecisionButton)
        try:
            await self.tree.sync()
        except discord.HTTPException:
            log.exception("could not register the /ask command")

    async def on_message(self, message: discord.Message) -> None:
        if self.user is not None:
            await self.handlers.on_message(self.user, message)
