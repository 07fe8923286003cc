"""Discord's `/ask`: deferred at once, then answered by edits of the interaction's response, in a thread, DM or channel;
with `private: True` only the asker sees it (adapters/discord/private_answers.py)."""

from __future__ import annotations

import logging

import discord
from discord import app_commands

from adapters import wording
from adapters.answers import AnswerRunner
from adapters.gate import Gate
from core.engine import Engine
from core.requests import Request

from . import transport_calls as calls
from .inbound import DiscordAccess, actor_of, guild_of
from .interaction_answers import InteractionAnswers, conversation_of, reaches, refuse
from .message_commands import DiscordMessageCommands
from .surface import DiscordSurfaces

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
        self._answers = InteractionAnswers(surfaces, access)

    def add_to(self, tree: app_commands.CommandTree[discord.Client]) -> None:
        """Defines `/ask`, and the message commands (message_commands.py), on the client's command tree (synced at
        start when their definition changed)."""

        @tree.command(name=COMMAND, description="Ask relaybot a question")
        @app_commands.describe(
            question="What do you want to know?",
            private="Only you see the answer, its sources and any approval it needs (default: everyone here)",
        )
        async def ask(
            interaction: discord.Interaction, question: app_commands.Range[str, 1, QUESTION_MAX_CHARS],
            private: bool = False,
        ) -> None:
            await self.on_ask(interaction, question, private=private)

        DiscordMessageCommands(
            engine=self._engine, runner=self._runner, surfaces=self._surfaces, gate=self._gate, access=self._access,
            message_content=tree.client.intents.message_content,
        ).add_to(tree)

    async def on_ask(self, interaction: discord.Interaction, question: str, *, private: bool = False) -> None:
        with self._gate.track():
            if not self._gate.accepting:
                await calls.respond(interaction, wording.shutting_down())
                return
            if not self._gate.allows(guild_of(interaction.guild_id)):
                await calls.respond(interaction, wording.not_enabled_here())
                return
            # Deferred at once: Discord wants an answer within 3 s; the answer streams by edits.
            await calls.acknowledge(interaction, thinking=True, ephemeral=private)
            if interaction.guild_id is None:
                # Checked after deferring: a member lookup may take longer than Discord's 3 s.
                refusal = await self._access.refusal(interaction.user.id)
                if refusal is not None:
                    await refuse(interaction, refusal)
                    return
            key = conversation_of(interaction, one_off=private)
            surface = await self._answers.surface(interaction, key, private=private)
            if surface is None:
                return
            request = Request(
                question=question.strip(), conversation=key, user=actor_of(interaction.user),
                reaches=reaches(private=private),
            )
            self._runner.submit(self._engine.ask(request), surface)
