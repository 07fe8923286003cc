"""Discord's message commands (a message's Apps menu): "Ask relaybot about this" answered where the message is,
"Ask relaybot privately", and "Summarise this thread" answered there too, read through the conversation reader
(the same three as Slack's message shortcuts).

Each is a one-off conversation in the message's channel (a thread's parent): the channel's sources, its thread or
channel read back as context. Where the bot may not read the channel (no View Channel / Read Message History
there, or no Message Content intent in a guild), it answers privately and says it cannot read it: the question
from the message alone, the summary not at all."""

from __future__ import annotations

import logging

import discord
from discord import app_commands

from adapters import wording
from adapters.answers import AnswerRunner
from adapters.gate import Gate
from adapters.policy import THREAD_CONTEXT_MAX_MESSAGES
from core.engine import Engine
from core.requests import ConversationKey, PriorMessage, Request
from core.tools.context import ConversationUnreadable, ReadScope

from . import render
from . import transport_calls as calls
from .interaction_answers import InteractionAnswers, conversation_of, reaches, refuse
from .inbound import DM_WORKSPACE, DiscordAccess, actor_of, guild_of
from .reader import DiscordReader, history
from .surface import PLATFORM, DiscordSurfaces

log = logging.getLogger(__name__)

ASK_ABOUT = "Ask relaybot about this"
ASK_PRIVATELY = "Ask relaybot privately"
SUMMARISE = "Summarise this thread"
# The messages a summary reads (newest first, the engine trims them to its history budget).
SUMMARY_MAX_MESSAGES = THREAD_CONTEXT_MAX_MESSAGES


class DiscordMessageCommands:
    """The message commands' handlers, answered through the interaction as /ask is (adapters/discord/commands.py)."""

    def __init__(
        self, *, engine: Engine, runner: AnswerRunner, surfaces: DiscordSurfaces, gate: Gate, access: DiscordAccess,
        message_content: bool,
    ) -> None:
        self._engine = engine
        self._runner = runner
        self._surfaces = surfaces
        self._gate = gate
        self._access = access
        self._message_content = message_content
        self._answers = InteractionAnswers(surfaces, access)
        self._client: discord.Client | None = None

    def add_to(self, tree: app_commands.CommandTree[discord.Client]) -> None:
        """Defines the three message commands on the client's command tree (synced with /ask)."""
        self._client = tree.client

        @tree.context_menu(name=ASK_ABOUT)
        async def ask_about(interaction: discord.Interaction, message: discord.Message) -> None:
            await self.on_ask(interaction, message, private=False)

        @tree.context_menu(name=ASK_PRIVATELY)
        async def ask_privately(interaction: discord.Interaction, message: discord.Message) -> None:
            await self.on_ask(interaction, message, private=True)

        @tree.context_menu(name=SUMMARISE)
        async def summarise(interaction: discord.Interaction, message: discord.Message) -> None:
            await self.on_summarise(interaction, message)

    def can_read(self, interaction: discord.Interaction) -> bool:
        """Whether the bot may read the channel the command was used in, as Discord says in the interaction itself
        (the bot's permissions there), and whether it would be given the messages' text at all."""
        if interaction.guild_id is None:
            return True
        permissions = interaction.app_permissions
        return self._message_content and permissions.view_channel and permissions.read_message_history

    async def _admitted(self, interaction: discord.Interaction, *, private: bool) -> bool:
        """The gate's checks, then the deferred response (private: only the asker sees it), then the DM rule."""
        if not self._gate.accepting:
            await calls.respond(interaction, wording.shutting_down())
            return False
        if not self._gate.allows(guild_of(interaction.guild_id)):
            await calls.respond(interaction, wording.not_enabled_here())
            return False
        await calls.acknowledge(interaction, thinking=True, ephemeral=private)
        if interaction.guild_id is None:
            refusal = await self._access.refusal(interaction.user.id)
            if refusal is not None:
                await refuse(interaction, refusal)
                return False
        return True

    async def on_ask(self, interaction: discord.Interaction, message: discord.Message, *, private: bool) -> None:
        """The message (and the conversation before it) as the question, answered where the message is or privately."""
        with self._gate.track():
            readable = self.can_read(interaction)
            private = private or not readable
            if not await self._admitted(interaction, private=private):
                return
            text = render.clean_question(message.content)
            if not text:
                await refuse(interaction, wording.empty_question())
                return
            context = await self._context(interaction, message) if readable else ()
            key = conversation_of(interaction, one_off=True)
            preface = None if readable else wording.cannot_read_here_answered_privately()
            surface = await self._answers.surface(interaction, key, private=private, preface=preface)
            if surface is None:
                return
            request = Request(
                question=wording.about_message(message.author.display_name, text), conversation=key,
                user=actor_of(interaction.user), thread_context=context, reaches=reaches(private=private),
            )
            self._runner.submit(self._engine.ask(request), surface)

    async def on_summarise(self, interaction: discord.Interaction, message: discord.Message) -> None:
        """The thread (or channel) the message is in, summarised there; where the bot may not read it, the asker alone
        is told so."""
        with self._gate.track():
            readable = self.can_read(interaction)
            if not await self._admitted(interaction, private=not readable):
                return
            if not readable:
                await refuse(interaction, wording.cannot_read_here_to_summarise())
                return
            where, scope = _read_place(interaction, message)
            try:
                prior = await self._reader().read(where, scope=scope, limit=SUMMARY_MAX_MESSAGES)
            except ConversationUnreadable as unreadable:
                log.warning("could not read %s %s to summarise it (%s)", scope, where.thread or where.channel,
                            unreadable)
                await refuse(interaction, wording.cannot_read_here_to_summarise())
                return
            if not prior:
                await refuse(interaction, wording.nothing_to_summarise())
                return
            key = conversation_of(interaction, one_off=True)
            surface = await self._answers.surface(interaction, key, private=False)
            if surface is None:
                return
            request = Request(
                question=wording.summarise_request(), conversation=key, user=actor_of(interaction.user),
                thread_context=tuple(prior),
            )
            self._runner.submit(self._engine.ask(request), surface)

    async def _context(self, interaction: discord.Interaction, message: discord.Message) -> tuple[PriorMessage, ...]:
        """The messages before the asked-about one in its thread or channel, oldest first; none when they cannot be
        read (the question is then the message alone)."""
        client, channel = self._client, interaction.channel
        me = client.user if client is not None else None
        if me is None or channel is None:
            return ()
        try:
            return tuple(await history(
                channel, limit=THREAD_CONTEXT_MAX_MESSAGES, me=me, before=message,  # type: ignore[arg-type]
                budget=self._surfaces.budgets.global_budget,
            ))
        except Exception:
            log.warning("could not read the messages before %s", message.id, exc_info=True)
            return ()

    def _reader(self) -> DiscordReader:
        # The reader read_conversation uses (adapters/discord/reader.py), on the bot-wide budget.
        return DiscordReader(
            client=lambda: self._client, message_content=self._message_content,
            budget=self._surfaces.budgets.global_budget,
        )


def _read_place(interaction: discord.Interaction, message: discord.Message) -> tuple[ConversationKey, ReadScope]:
    """What "Summarise this thread" reads, and how the reader reads it: the thread the message is in, the thread
    started on it (which has the message's id), or else its channel."""
    channel = interaction.channel
    channel_id = str(interaction.channel_id or 0)
    if interaction.guild_id is None:
        return ConversationKey(platform=PLATFORM, workspace=DM_WORKSPACE, channel=channel_id, direct=True), "channel"
    workspace = str(interaction.guild_id)
    if isinstance(channel, discord.Thread):
        parent = str(channel.parent_id)
        return ConversationKey(platform=PLATFORM, workspace=workspace, channel=parent, thread=channel_id), "thread"
    if message.flags.has_thread:
        return ConversationKey(platform=PLATFORM, workspace=workspace, channel=channel_id, thread=str(message.id)), "thread"
    return ConversationKey(platform=PLATFORM, workspace=workspace, channel=channel_id), "channel"
