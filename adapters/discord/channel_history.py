"""Discord's history door for learning (core.learning.ports.ChannelHistory): a channel's info, its messages newest first, its public threads (active and archived) and their replies, over REST through transport_history.py."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

import discord

from core.learning.model import ChannelInfo, ChannelMessage, HistoryPage, LearningRefused

from .channel_permissions import READ_MESSAGE_HISTORY, VIEW_CHANNEL, channel_permissions
from .learning_messages import (PRIVATE_THREAD_TYPE, THREAD_TYPES, display_name, from_json, is_person, jump_url,
                                snowflake_at, thread_root)
from .transport_history import MESSAGES_PAGE, HistoryDoor, JSON

log = logging.getLogger(__name__)
T = TypeVar("T")

DM_TYPES = frozenset({1, 3})
# Text and announcement channels: where messages are written (a forum's or a voice channel's are not read).
TEXT_TYPES = frozenset({0, 5})
# The application's flags that say the Message Content intent is on in the Developer Portal: GATEWAY_MESSAGE_CONTENT
# (a verified bot's) or GATEWAY_MESSAGE_CONTENT_LIMITED (a bot in under 100 servers).
MESSAGE_CONTENT_FLAGS = (1 << 18) | (1 << 19)
PUBLIC_PHASE = "public:"
NAMES_KEPT = 10_000

NEVER_DMS = "Direct messages and group DMs are never learned from: choose a server channel."
NO_INTENT = ("Discord sends the bot no message text without the Message Content intent: turn it on for the bot in "
             "Discord's Developer Portal (Bot → Privileged Gateway Intents), set DISCORD_MESSAGE_CONTENT_INTENT=true "
             "and restart relaybot.")
NO_INTENT_PORTAL = ("The Message Content intent is off in Discord's Developer Portal: turn it on for the bot there "
                    "(Bot → Privileged Gateway Intents); without it the channel's history comes back with no text.")


def unknown_channel(channel: str) -> str:
    return f"Discord knows no channel {channel} the bot can see: check the id, or add the bot to that server."


def cannot_view(channel: str) -> str:
    return (f"The bot cannot view <#{channel}>: give its role View Channel and Read Message History there "
            "(the channel's Permissions), then try again.")


def cannot_read_history(channel: str) -> str:
    return (f"The bot can see <#{channel}> but not its past messages: give its role Read Message History there "
            "(the channel's Permissions), then try again.")


def not_text(channel: str) -> str:
    return (f"<#{channel}> is not a text or announcement channel (a forum, voice channel or category): relaybot "
            "learns from text and announcement channels and their threads.")


def a_thread(parent: str) -> str:
    return f"That is a thread: choose the channel it is in, <#{parent}>; its threads are learned with it."


class DiscordChannelHistory:
    """Implements core.learning.ports.ChannelHistory over Discord's REST API. Private threads are not read: only
    their members can see them, so their passages would reach people of the channel who cannot."""

    def __init__(self, door: HistoryDoor, *, me: Callable[[], int | None], message_content: bool) -> None:
        self._door = door
        self._me = me
        self._message_content = message_content
        self._names: dict[str, str] = {}  # thread creators' display names, by user id

    async def info(self, workspace: str, channel: str) -> ChannelInfo:
        if not workspace.isdigit():
            raise LearningRefused(NEVER_DMS)
        if not self._message_content:
            raise LearningRefused(NO_INTENT)
        data = await self._channel(channel)
        if int(data.get("type") or 0) in DM_TYPES:
            raise LearningRefused(NEVER_DMS)
        if str(data.get("guild_id")) != workspace:
            raise LearningRefused(unknown_channel(channel))
        if int(data.get("type") or 0) in THREAD_TYPES:
            raise LearningRefused(a_thread(str(data.get("parent_id"))))
        if int(data.get("type") or 0) not in TEXT_TYPES:
            raise LearningRefused(not_text(channel))
        if not await self._door.application_flags() & MESSAGE_CONTENT_FLAGS:
            raise LearningRefused(NO_INTENT_PORTAL)
        guild = await self._door.guild(int(workspace))
        me = self._me()  # after the first call: the CLI's door logs in on it
        member = await self._door.member(int(workspace), me) if me is not None else None
        mine = channel_permissions(guild, data, user_id=str(me), role_ids=(member or {}).get("roles") or ())
        if not mine & VIEW_CHANNEL:
            raise LearningRefused(cannot_view(channel))
        if not mine & READ_MESSAGE_HISTORY:
            raise LearningRefused(cannot_read_history(channel))
        everyone = channel_permissions(guild, data)
        return ChannelInfo(name=str(data.get("name") or channel), private=not everyone & VIEW_CHANNEL)

    async def _channel(self, channel: str) -> JSON:
        if not channel.isdigit():
            raise LearningRefused(unknown_channel(channel))
        try:
            return await self._door.channel(int(channel))
        except discord.NotFound:
            raise LearningRefused(unknown_channel(channel)) from None
        except discord.Forbidden:
            raise LearningRefused(cannot_view(channel)) from None

    async def history(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        page = await _readable(channel, self._door.messages(int(channel), before=int(cursor) if cursor else None))
        me = str(self._me() or "")  # after the first call: the CLI's door logs in on it
        kept = tuple(
            from_json(data, guild=workspace, channel=channel, me=me) for data in page
            if is_person(data) and int(data["id"]) >= snowflake_at(oldest)
        )
        reached = not page or int(page[-1]["id"]) < snowflake_at(oldest)
        more = len(page) == MESSAGES_PAGE and not reached
        return HistoryPage(messages=kept, next_cursor=str(page[-1]["id"]) if more else "")

    async def threads(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        """The channel's active public threads (from the guild's list), then its archived public ones page by page
        (newest archived first, `before` their archive time) until one archived before `oldest`."""
        if not cursor:
            active = await self._door.active_threads(int(workspace))
            ours = [t for t in active
                    if str(t.get("parent_id")) == channel and int(t.get("type") or 0) != PRIVATE_THREAD_TYPE]
            return HistoryPage(messages=await self._roots(workspace, ours), next_cursor=PUBLIC_PHASE)
        before = cursor.removeprefix(PUBLIC_PHASE) or None
        archived, has_more = await _readable(channel, self._door.archived_threads(int(channel), before=before))
        kept: list[JSON] = []
        last = ""
        for thread in archived:
            last = str((thread.get("thread_metadata") or {}).get("archive_timestamp") or "")
            if last and datetime.fromisoformat(last.replace("Z", "+00:00")) < oldest:
                return HistoryPage(messages=await self._roots(workspace, kept))
            kept.append(thread)
        return HistoryPage(messages=await self._roots(workspace, kept),
                           next_cursor=PUBLIC_PHASE + last if has_more and last else "")

    async def _roots(self, workspace: str, threads: list[JSON]) -> tuple[ChannelMessage, ...]:
        """The threads as roots, each by its creator's name: a member read once per person (a few people start most
        threads), '' for one no longer in the server."""
        for owner in {str(t.get("owner_id") or "") for t in threads} - set(self._names):
            if owner.isdigit():
                member = await self._door.member(int(workspace), int(owner))
                self._names[owner] = display_name(member) if member is not None else ""
                while len(self._names) > NAMES_KEPT:
                    del self._names[next(iter(self._names))]
        return tuple(thread_root(t, guild=workspace, owner_name=self._names.get(str(t.get("owner_id") or ""), ""))
                     for t in threads)

    async def replies(self, workspace: str, channel: str, thread: str, *, cursor: str) -> HistoryPage:
        """The thread's messages oldest first (pages `after` the last one read); the first page starts with the
        message the thread was started on, when there is one (it has the thread's id, in the channel)."""
        starter = await _readable(channel, self._door.message(int(channel), int(thread))) if not cursor else None
        me = str(self._me() or "")
        root: tuple[ChannelMessage, ...] = ()
        if starter is not None and is_person(starter):
            root = (from_json(starter, guild=workspace, channel=channel, thread=thread, me=me),)
        try:
            page = await self._door.messages(int(thread), after=int(cursor) if cursor else 0)
        except discord.Forbidden:
            log.info("the bot cannot read Discord thread %s (private, or no access): its replies are not learned", thread)
            return HistoryPage(messages=root)
        me = str(self._me() or "")
        oldest_first = sorted(page, key=lambda data: int(data["id"]))
        replies = tuple(from_json(data, guild=workspace, channel=thread, thread=thread, me=me)
                        for data in oldest_first if is_person(data))
        more = len(page) == MESSAGES_PAGE
        return HistoryPage(messages=root + replies, next_cursor=str(oldest_first[-1]["id"]) if more else "")

    async def permalink(self, workspace: str, channel: str, message: ChannelMessage) -> str:
        if message.permalink:
            return message.permalink
        where = message.thread if message.thread and message.thread != message.id else channel
        return jump_url(workspace, where, message.id)


async def _readable(channel: str, read: Awaitable[T]) -> T:
    """A read of the channel; Discord saying it is gone or no longer the bot's to read is the sentence to show."""
    try:
        return await read
    except discord.NotFound:
        raise LearningRefused(unknown_channel(channel)) from None
    except discord.Forbidden:
        raise LearningRefused(cannot_view(channel)) from None
