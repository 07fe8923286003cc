"""Discord's `/ask`: deferred at once, then answered by edits of the interaction's response, in a thread, DM or channel."""

from __future__ import annotations

import logging

import discord
from discord import app_commands

from adapters import wording
from adapters.answers import AnswerRunner
from adapters.gate import Gate
from core.engine import Engine
from core.requests import ConversationKey, Request

from . import transport_calls as calls
from .inbound import DM_WORKSPACE, DiscordAccess, actor_of, guild_of, thread_key
from .surface import PLATFORM, DiscordSurfaces
from .transport import NO_PINGS

log = logging.getLogger(__name__)

COMMAND = "ask"
QUESTION_MAX_CHARS = 4_000


class DiscordCommands:
    """The `/ask` app command's handler, answered like a mention (as Slack's SlackCommands answers its `/ask`)."""

    def __init__(
        self, *, engine: Engine, runner: AnswerRunner, surfaces: DiscordSurfaces, gate: Gate, access: DiscordAccess
    ) -> None:
        self._engine = engine
        self._runner = runner
        self._surfaces = surfaces
        self._gate = gate
        self._access = access

    def add_to(self, tree: app_commands.CommandTree[discord.Client]) -> None:
        """Defines `/ask` on the client's command tree (synced at start when its definition changed)."""

        @tree.command(name=COMMAND, description="Ask relaybot a question")
        @app_commands.describe(question="What do you want to know?")
        async def ask(interaction: discord.Interaction, question: app_commands.Range[str, 1, QUESTION_MAX_CHARS]) -> None:
            await self.on_ask(interaction, question)

    async def on_ask(self, interaction: discord.Interaction, question: str) -> None:
        with self._gate.track():
            if not self._gate.accepting:
                await calls.respond(interaction, wording.shutting_down())
                return
            if not self._gate.allows(guild_of(interaction.guild_id)):
                await calls.respond(interaction, wording.not_enabled_here())
                return
            # Deferred at once: Discord wants an answer within 3 s; the answer streams by edits.
            await calls.acknowledge(interaction, thinking=True)
            channel = interaction.channel
            channel_id = interaction.channel_id or 0
            if interaction.guild_id is None:
                # Checked after deferring: a member lookup may take longer than Discord's 3 s.
                refusal = await self._access.refusal(interaction.user.id)
                if refusal is not None:
                    await _refuse_ask(interaction, refusal)
                    return
                key = ConversationKey(platform=PLATFORM, workspace=DM_WORKSPACE, channel=str(channel_id), direct=True)
            elif isinstance(channel, discord.Thread):
                key = thread_key(interaction.guild_id, channel)
            else:
                # A one-off conversation: /ask in a channel has no thread to continue in.
                key = ConversationKey(
                    platform=PLATFORM,
                    workspace=str(interaction.guild_id),
                    channel=str(channel_id),
                    thread=f"ask-{interaction.id}",
                )
            surface = self._surfaces.for_interaction(interaction, workspace=key.workspace, thread=key.thread)
            request = Request(question=question.strip(), conversation=key, user=actor_of(interaction.user))
            self._runner.submit(self._engine.ask(request), surface)


async def _refuse_ask(interaction: discord.Interaction, text: str) -> None:
    """The deferred /ask response becomes the refusal, and nothing else happens."""
    try:
        await calls.update_original(interaction, content=text, allowed_mentions=NO_PINGS)
    except Exception:
        log.exception("could not refuse an /ask")
