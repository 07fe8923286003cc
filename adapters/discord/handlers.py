"""Messages and /ask → Request → engine.ask → streamed answer, in the right thread or DM."""

from __future__ import annotations

import logging

import discord

from core.attachments import IMAGE_ATTACHMENT_MAX_BYTES, IMAGE_CONTENT_TYPES, TEXT_ATTACHMENT_MAX_BYTES, is_text_like
from core.config import Settings
from core.engine import Engine
from core.requests import Attachment, ConversationKey, PriorMessage, Request
from core.store.processed_events import ProcessedEvents

from . import rendering, wording
from .answer import PLATFORM, AnswerPlace, AnswerStreams
from .gate import DM_WORKSPACE, Gate, actor_of, workspace_of
from .transport import InteractionTransport, ChannelTransport

log = logging.getLogger(__name__)

THREAD_CONTEXT_MESSAGES = 50


class Handlers:
    """What the client calls for a message and for /ask."""

    def __init__(
        self, *, settings: Settings, engine: Engine, streams: AnswerStreams, gate: Gate, processed: ProcessedEvents
    ) -> None:
        self._settings = settings
        self._engine = engine
        self._streams = streams
        self._gate = gate
        self._processed = processed

    async def on_message(self, me: discord.ClientUser, message: discord.Message) -> None:
        with self._gate.track():
            # Who may ask
            if not self._gate.accepting or message.author.bot or message.author.id == me.id:
                return
            if message.guild is not None and not self._gate.allows_guild(message.guild.id):
                return
            mentioned = me.id in message.raw_mentions
            channel = message.channel

            # Where the answer goes, and whether to answer at all
            thread_context: tuple[PriorMessage, ...] = ()
            if message.guild is None:
                key = ConversationKey(platform=PLATFORM, workspace=DM_WORKSPACE, channel=str(channel.id))
            elif isinstance(channel, discord.Thread):
                key = _thread_key(message.guild.id, channel)
                known = await self._engine.conversations.find(key)
                if not mentioned and not (
                    self._settings.discord_message_content_intent and known is not None and channel.owner_id == me.id
                ):
                    return
                if known is None:
                    thread_context = await _thread_context(channel, before=message)
            elif mentioned and isinstance(channel, discord.TextChannel):
                key = None  # the thread is created below, once the event is known to be new
            else:
                return
            if not await self._processed.first_time(PLATFORM, str(message.id)):
                return

            question = rendering.clean_question(message.content)
            attachments = await _download(message.attachments)
            if not question and not attachments:
                await _reply_once(ChannelTransport(channel, reply_to=message.id), wording.empty_question())
                return
            found = await self._place(message, key)
            if found is None:
                return
            place, key = found
            request = Request(
                question=question,
                conversation=key,
                user=actor_of(message.author),
                attachments=attachments,
                thread_context=thread_context,
                platform_refs={"message_id": str(message.id), "channel_id": str(channel.id)},
            )
            await self._streams.run(self._engine.ask(request), place)

    async def _place(
        self, message: discord.Message, key: ConversationKey | None
    ) -> tuple[AnswerPlace, ConversationKey] | None:
        channel = message.channel
        workspace = workspace_of(message.guild.id if message.guild else None)
        if key is not None:
            # A DM or an existing thread: answered in place, replying to the question.
            thread = key.thread
            transport = ChannelTransport(channel, reply_to=message.id)
            return AnswerPlace(
                transport=transport, channel=channel, channel_id=channel.id, workspace=workspace, thread=thread
            ), key
        name = rendering.thread_name(rendering.clean_question(message.content))
        try:
            thread = await message.create_thread(name=name)
        except discord.HTTPException:
            log.exception("could not open a thread on message %s", message.id)
            return None
        key = _thread_key(thread.guild.id, thread)
        return AnswerPlace(
            transport=ChannelTransport(thread), channel=thread, channel_id=thread.id, workspace=workspace, thread=key.thread
        ), key

    async def on_ask(self, interaction: discord.Interaction, question: str) -> None:
        with self._gate.track():
            if not self._gate.accepting:
                await interaction.response.send_message(wording.shutting_down(), ephemeral=True)
                return
            if not self._gate.allows_guild(interaction.guild_id):
                await interaction.response.send_message(wording.not_enabled_here(), ephemeral=True)
                return
            # Deferred at once: Discord wants an answer within 3 s; the answer streams by edits.
            await interaction.response.defer(thinking=True)
            channel = interaction.channel
            channel_id = interaction.channel_id or 0
            if interaction.guild_id is None:
                key = ConversationKey(platform=PLATFORM, workspace=DM_WORKSPACE, channel=str(channel_id))
            elif isinstance(channel, discord.Thread):
                key = _thread_key(interaction.guild_id, channel)
            else:
                # A one-off conversation: /ask in a channel has no thread to continue in.
                key = ConversationKey(
                    platform=PLATFORM,
                    workspace=str(interaction.guild_id),
                    channel=str(channel_id),
                    thread=f"ask-{interaction.id}",
                )
            place = AnswerPlace(
                transport=InteractionTransport(interaction),
                channel=channel,  # type: ignore[arg-type]
                channel_id=channel_id,
                workspace=key.workspace,
                thread=key.thread,
                show_typing=False,
            )
            request = Request(
                question=question.strip(),
                conversation=key,
                user=actor_of(interaction.user),
                platform_refs={"interaction_id": str(interaction.id), "channel_id": str(channel_id)},
            )
            await self._streams.run(self._engine.ask(request), place)


def _thread_key(guild_id: int, thread: discord.Thread) -> ConversationKey:
    return ConversationKey(
        platform=PLATFORM, workspace=str(guild_id), channel=str(thread.parent_id), thread=str(thread.id)
    )


async def _thread_context(thread: discord.Thread, *, before: discord.Message) -> tuple[PriorMessage, ...]:
    """The thread's earlier messages, oldest first; the engine trims them to its history budget."""
    prior: list[PriorMessage] = []
    try:
        async for earlier in thread.history(limit=THREAD_CONTEXT_MESSAGES, before=before):
            text = rendering.clean_question(earlier.content)
            if text:
                prior.append(PriorMessage(author=earlier.author.display_name, text=text, is_bot=earlier.author.bot))
    except discord.HTTPException:
        log.warning("could not read the earlier messages of thread %s", thread.id)
    return tuple(reversed(prior))


async def _download(attachments: list[discord.Attachment]) -> tuple[Attachment, ...]:
    """Text-like files and images within the engine's size caps; other files are only named."""
    files: list[Attachment] = []
    for attachment in attachments:
        content_type = attachment.content_type or ""
        named = Attachment(filename=attachment.filename, content_type=content_type, data=b"")
        if is_text_like(named):
            cap = TEXT_ATTACHMENT_MAX_BYTES
        elif content_type.split(";")[0].strip().lower() in IMAGE_CONTENT_TYPES:
            cap = IMAGE_ATTACHMENT_MAX_BYTES
        else:
            files.append(named)
            continue
        if attachment.size > cap:
            log.info("skipping attachment %s: %d bytes is over the %d byte cap", attachment.filename, attachment.size, cap)
            continue
        try:
            data = await attachment.read()
        except (discord.HTTPException, OSError):
            log.warning("could not download attachment %s", attachment.filename)
            continue
        files.append(Attachment(filename=attachment.filename, content_type=content_type, data=data))
    return tuple(files)


async def _reply_once(transport: ChannelTransport, text: str) -> None:
    """A short reply that is not streamed (e.g. to an empty question)."""
    try:
        await transport.post(text)
    except Exception:
        log.exception("could not reply to a message")
