"""Messages → Request → engine.ask → the answer, played in the right thread or DM (a respond_to=all channel's
top-level messages too); who may ask (DiscordAccess)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Literal

import discord

from adapters import wording
from adapters.answers import AnswerRunner
from adapters.gate import DATABASE_DOWN, OVER_CAP_REACTION, AnswerAllCap, Gate, over_cap_sentence
from adapters.policy import THREAD_CONTEXT_MAX_MESSAGES, FileOnMessage, read_files
from adapters.streaming import Priority
from adapters.streaming.answer_place import asked_at
from core.config import DirectMessagePolicy
from core.engine import Engine
from core.ports import KnownConversations
from core.requests import Actor, Attachment, ConversationKey, PriorMessage, Request

from . import render
from . import transport_calls as calls
from .reader import history
from .surface import PLATFORM, DiscordSurface, DiscordSurfaces
from .transport import ChannelTransport

log = logging.getLogger(__name__)

DM_WORKSPACE = "@dm"
# How long a member lookup is trusted, either way: leaving a guild takes effect within this time.
MEMBERSHIP_CACHE_S = 600.0
MEMBERSHIP_CACHE_MAX_USERS = 10_000
MEMBER_LOOKUP_TIMEOUT_S = 10.0

# The message types that are a person writing (not a join, a pin, a boost or a thread's start).
PERSON_MESSAGE_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})
DirectMessageVerdict = Literal["allowed", "closed", "not_member", "unknown"]
# Whether a user is a member of a guild: True, False (Discord said 404), or it raises (unknown).
MemberLookup = Callable[[int, int], Awaitable[bool]]


def workspace_of(guild_id: int | None) -> str:
    """The conversation workspace: the guild, or one shared name for DMs."""
    return DM_WORKSPACE if guild_id is None else str(guild_id)


def guild_of(guild_id: int | None) -> str | None:
    """What the gate checks against DISCORD_GUILD_IDS: None for a DM, which the gate passes and
    DiscordAccess decides."""
    return None if guild_id is None else str(guild_id)


class DiscordAccess:
    """Who may use the bot in a DM (messages, /ask, clicks): DIRECT_MESSAGES says nobody (closed), anyone
    (open), or members of a guild in DISCORD_GUILD_IDS (members; anyone when there is no allowlist).

    The bot has no members intent, so membership is asked of Discord's REST guild-member endpoint and
    remembered per user for MEMBERSHIP_CACHE_S, a 404 ("not a member") as well; a lookup that fails
    otherwise refuses this once and is not remembered.
    """

    def __init__(
        self,
        *,
        allowed_guilds: tuple[str, ...],
        direct_messages: DirectMessagePolicy,
        is_member: MemberLookup,
        clock: Callable[[], float] = time.monotonic,
        cache_s: float = MEMBERSHIP_CACHE_S,
    ) -> None:
        self._policy = direct_messages
        self._guild_ids = tuple(int(guild_id) for guild_id in allowed_guilds if guild_id.isdigit())
        self._is_member = is_member
        self._clock = clock
        self._cache_s = cache_s
        # user id → (known until, member?); oldest first, so expired entries are dropped from the front.
        self._known: OrderedDict[int, tuple[float, bool]] = OrderedDict()

    async def verdict(self, user_id: int) -> DirectMessageVerdict:
        if self._policy == "closed":
            return "closed"
        if self._policy == "open" or not self._guild_ids:
            return "allowed"
        now = self._clock()
        known = self._known.get(user_id)
        if known is not None and known[0] > now:
            return "allowed" if known[1] else "not_member"
        member = await self._look_up(user_id)
        if member is None:
            return "unknown"
        self._remember(user_id, member, now)
        return "allowed" if member else "not_member"

    async def refusal(self, user_id: int) -> str | None:
        """The sentence for a DM this user may not send, or None when they may."""
        match await self.verdict(user_id):
            case "allowed":
                return None
            case "closed":
                return wording.direct_messages_off()
            case "not_member":
                return wording.direct_messages_members_only()
            case "unknown":
                return wording.membership_unknown()

    async def _look_up(self, user_id: int) -> bool | None:
        unknown = False
        for guild_id in self._guild_ids:
            try:
                if await asyncio.wait_for(self._is_member(guild_id, user_id), MEMBER_LOOKUP_TIMEOUT_S):
                    return True
            except Exception:
                log.warning("could not look up whether user %s is a member of guild %s", user_id, guild_id, exc_info=True)
                unknown = True
        return None if unknown else False

    def _remember(self, user_id: int, member: bool, now: float) -> None:
        self._known.pop(user_id, None)
        self._known[user_id] = (now + self._cache_s, member)
        while self._known:
            oldest_until, _ = next(iter(self._known.values()))
            if oldest_until > now and len(self._known) <= MEMBERSHIP_CACHE_MAX_USERS:
                break
            self._known.popitem(last=False)


def actor_of(user: discord.User | discord.Member, *, permissions: discord.Permissions | None = None) -> Actor:
    """An Actor from a Discord user: role ids as strings; Manage Server counts as admin."""
    roles = frozenset(str(role.id) for role in getattr(user, "roles", ()) if not role.is_default())
    is_admin = bool(permissions is not None and permissions.manage_guild)
    return Actor(id=str(user.id), name=user.display_name, roles=roles, is_admin=is_admin)


class DiscordInbound:
    """What the client calls for a message (`/ask` is commands.py's)."""

    def __init__(
        self,
        *,
        engine: Engine,
        runner: AnswerRunner,
        surfaces: DiscordSurfaces,
        gate: Gate,
        conversations: KnownConversations,
        access: DiscordAccess,
        follow_unmentioned: bool,
        answer_all_cap: AnswerAllCap | None = None,
    ) -> None:
        self._engine = engine
        self._runner = runner
        self._surfaces = surfaces
        self._gate = gate
        self._conversations = conversations
        self._access = access
        # With the message-content intent, follow-ups in the bot's own threads need no mention, and a
        # respond_to=all channel's top-level messages are answered (without it their text is blank).
        self._follow_unmentioned = follow_unmentioned
        self.answer_all_cap = answer_all_cap or AnswerAllCap(per_minute=engine.settings.respond_all_per_minute)

    async def on_message(self, me: discord.ClientUser, message: discord.Message) -> None:
        # Nothing redelivers a gateway message: one that cannot be recorded is held until the database is back.
        try:
            await self._take(me, message)
        except DATABASE_DOWN:
            self._gate.hold(
                str(message.id), take=lambda: self._take(me, message),
                tell=lambda: _reply_once(ChannelTransport(message.channel, reply_to=message.id), wording.database_unreachable()),
            )

    async def _take(self, me: discord.ClientUser, message: discord.Message) -> None:
        with self._gate.track():
            # Who may ask
            if not self._gate.accepting or message.author.bot or message.author.id == me.id:
                return
            guild_id = message.guild.id if message.guild is not None else None
            if not self._gate.allows(guild_of(guild_id)):
                return
            mentioned = me.id in message.raw_mentions
            channel = message.channel

            # Where the answer goes, and whether to answer at all
            thread_context: tuple[PriorMessage, ...] = ()
            if guild_id is None:
                key = ConversationKey(platform=PLATFORM, workspace=DM_WORKSPACE, channel=str(channel.id), direct=True)
            elif isinstance(channel, discord.Thread):
                key = thread_key(guild_id, channel)
                known = await self._conversations.exists(key)
                if not mentioned and not (
                    self._follow_unmentioned and known and channel.owner_id == me.id
                    and (await self._engine.channel(key)).answers_followups
                ):
                    return
                if not known:
                    thread_context = await _thread_context(channel, before=message, me=me)
            elif isinstance(channel, discord.TextChannel) and (mentioned or await self._answers_everything(message)):
                key = None  # the thread is created below, once the event is known to be new
            else:
                return
            if not await self._gate.first_time(str(message.id)):
                return
            if key is None and not mentioned and not await self._within_cap(message):
                return
            if guild_id is None:
                refusal = await self._access.refusal(message.author.id)
                if refusal is not None:
                    await _reply_once(ChannelTransport(channel, reply_to=message.id), refusal)
                    return

            question = render.clean_question(message.content)
            attachments = await _attachments(message.attachments)
            if not question and not attachments:
                await _reply_once(ChannelTransport(channel, reply_to=message.id), wording.empty_question())
                return
            surface, key = await self._place(message, key)
            request = Request(
                question=question,
                conversation=key,
                user=actor_of(message.author),
                attachments=attachments,
                thread_context=thread_context,
            )
            self._runner.submit(self._engine.ask(request), surface)

    async def _answers_everything(self, message: discord.Message) -> bool:
        """A person's top-level message in a respond_to=all channel, which this bot can read."""
        if not self._follow_unmentioned or message.type not in PERSON_MESSAGE_TYPES or message.webhook_id is not None:
            return False
        assert message.guild is not None
        key = ConversationKey(platform=PLATFORM, workspace=str(message.guild.id), channel=str(message.channel.id))
        try:
            return (await self._engine.channel(key)).answers_everything
        except Exception:
            # Nobody asked the bot: settings it cannot read cost this message its answer, never a stranger a sentence.
            log.warning("could not read the settings of channel %s; a top-level message there is not answered",
                        message.channel.id, exc_info=True)
            return False

    async def _within_cap(self, message: discord.Message) -> bool:
        """RESPOND_ALL_PER_MINUTE: past it, the first message of the minute is told to mention the bot, the rest marked."""
        assert message.guild is not None
        turn = self.answer_all_cap.take(f"{message.guild.id}:{message.channel.id}")
        if turn == "tell":
            await _reply_once(ChannelTransport(message.channel, reply_to=message.id),
                              over_cap_sentence(self.answer_all_cap.per_minute))
        elif turn == "mark":
            try:
                await calls.react(message, OVER_CAP_REACTION)
            except Exception as exc:
                log.info("could not mark message %s over the cap: %r", message.id, exc)
        return turn == "answer"

    async def _place(
        self, message: discord.Message, key: ConversationKey | None
    ) -> tuple[DiscordSurface, ConversationKey]:
        channel = message.channel
        workspace = workspace_of(message.guild.id if message.guild else None)
        asked = message.created_at.timestamp()
        if key is None:
            name = render.thread_name(render.clean_question(message.content))
            bot_wide = self._surfaces.budgets.global_budget
            if bot_wide is not None:
                # Opening the thread counts against Discord's per-bot limit too: a burst of questions must
                # not open fifty at once. Its place is the question's age, as for the first text that comes next.
                clock = self._surfaces.clock
                await bot_wide.acquire(Priority.FIRST, channel.id,
                                       since=asked_at(clock, asked, time_scale=getattr(clock, "time_scale", 1.0)))
            try:
                thread = await calls.open_thread(message, name=name)
            except Exception:
                # The event is already taken: the question is answered where it was asked instead.
                log.warning("could not open a thread on message %s; answering in the channel", message.id, exc_info=True)
                key = ConversationKey(
                    platform=PLATFORM, workspace=workspace, channel=str(channel.id), thread=f"msg-{message.id}"
                )
            else:
                key = thread_key(thread.guild.id, thread)
                return self._surfaces.in_channel(thread, channel_id=thread.id, workspace=workspace, thread=key.thread,
                                                 asked_epoch_s=asked), key
        # A DM, an existing thread, or a channel the bot cannot open threads in: answered in place,
        # replying to the question.
        surface = self._surfaces.in_channel(
            channel, channel_id=channel.id, workspace=workspace, thread=key.thread, reply_to=message.id,
            asked_epoch_s=asked,
        )
        return surface, key


def thread_key(guild_id: int, thread: discord.Thread) -> ConversationKey:
    return ConversationKey(
        platform=PLATFORM, workspace=str(guild_id), channel=str(thread.parent_id), thread=str(thread.id)
    )


async def _thread_context(
    thread: discord.Thread, *, before: discord.Message, me: discord.ClientUser
) -> tuple[PriorMessage, ...]:
    """The thread's earlier messages, oldest first; the engine trims them to its history budget."""
    try:
        return tuple(await history(thread, limit=THREAD_CONTEXT_MAX_MESSAGES, me=me, before=before))
    except Exception:
        log.warning("could not read the earlier messages of thread %s", thread.id)
        return ()


async def _attachments(attachments: list[discord.Attachment]) -> tuple[Attachment, ...]:
    """The message's files under the shared rules: read when they may be, otherwise only named."""
    files = [
        FileOnMessage(filename=a.filename, content_type=a.content_type or "", size=a.size, handle=a)
        for a in attachments
    ]
    return await read_files(files, _download)


async def _download(file: FileOnMessage, cap: int) -> bytes | None:
    # The size Discord reported was already checked against `cap` by read_files.
    attachment: discord.Attachment = file.handle
    try:
        return await attachment.read()
    except (discord.HTTPException, OSError):
        log.warning("could not download attachment %s", file.filename)
        return None


async def _reply_once(transport: ChannelTransport, text: str) -> None:
    """A short reply that is not streamed (e.g. to an empty question)."""
    try:
        await transport.post(text)
    except Exception:
        log.exception("could not reply to a message")
