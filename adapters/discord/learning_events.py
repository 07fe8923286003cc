"""Discord's live events made learning's ChannelChanges (new, edited and deleted messages, renames, channels and threads gone, the bot removed), handed to the engine in order by one background worker off the answer path."""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import discord

from adapters.gate import Gate
from core.learning.model import ChannelChange, ChannelMessage, ChannelPlace
from adapters.learning_feed import LearningFeed

from .channel_facts import DiscordChannelFacts
from .learning_messages import PERSON_TYPES, PRIVATE_THREAD_TYPE, THREAD_TYPES, from_message
from .transport_history import HistoryDoor
from .surface import PLATFORM

log = logging.getLogger(__name__)

THREADS_KEPT = 10_000


class DiscordLearningEvents:
    """The client's handlers for what learning hears; each only puts changes on the feed (never awaits the engine)."""

    def __init__(
        self, *, client: Callable[[], discord.Client | None], feed: LearningFeed, facts: DiscordChannelFacts, gate: Gate,
        door: HistoryDoor,
    ) -> None:
        self._client = client
        self._door = door
        self.feed = feed
        self._facts = facts
        self._gate = gate
        # Threads seen (id → parent, private?): a delete may come once the thread has left discord.py's cache.
        self._threads: OrderedDict[int, tuple[int, bool]] = OrderedDict()
        self._lost: set[int] = set()  # channels the bot may no longer view, told once

    def listen(self, client: discord.Client) -> None:
        """discord.py looks a handler up on the client by name each time; one already set (guilds.py's removal)
        still runs first."""
        for name in ("raw_message_edit", "raw_message_delete", "raw_bulk_message_delete", "guild_channel_update",
                     "guild_channel_delete", "raw_thread_delete", "guild_remove", "member_update", "raw_member_remove",
                     "guild_role_update"):
            setattr(client, f"on_{name}", _chained(getattr(client, f"on_{name}", None), getattr(self, f"on_{name}")))

    def on_message(self, message: discord.Message) -> None:
        """Every guild message the gateway delivers, in any channel (not only those the bot answers); called on the
        answer path, so it only queues, and a failure of its own is logged, never the answer's."""
        try:
            self._message(message)
        except Exception:
            log.exception("learning could not take Discord message %s", message.id)

    def _message(self, message: discord.Message) -> None:
        if message.guild is None or message.type.value not in PERSON_TYPES or not self._takes(message.guild.id):
            return
        learned = from_message(message, me=self._me())
        if learned.by_bot:
            return  # never learned from: not worth the engine's work (an answer streaming is an edit a second)
        self._put(message.guild.id, message.channel, lambda place: [
            ChannelChange(kind="message", place=place, message=_in_thread(learned, place, message.channel.id))])

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        message = payload.message
        if payload.guild_id is None or message.type.value not in PERSON_TYPES or not self._takes(payload.guild_id):
            return
        learned = from_message(message, me=self._me())
        if learned.by_bot:
            return
        self._put(payload.guild_id, message.channel, lambda place: [
            ChannelChange(kind="message", place=place, message=_in_thread(learned, place, payload.channel_id))])

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        self._deleted(payload.guild_id, payload.channel_id, (payload.message_id,))

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        self._deleted(payload.guild_id, payload.channel_id, sorted(payload.message_ids))

    async def on_raw_thread_delete(self, payload: discord.RawThreadDeleteEvent) -> None:
        """A thread deleted: its root (the thread has the root's id) and every reply go (`thread_gone`); deleting
        only the message a thread was started on leaves the thread, a plain `deleted`."""
        if self._takes(payload.guild_id) and payload.thread_type is not discord.ChannelType.private_thread:
            self.feed.put(ChannelChange(kind="deleted", place=_place_of(payload.guild_id, payload.parent_id),
                                        message_id=str(payload.thread_id), thread_gone=True))

    async def on_guild_channel_update(self, before: discord.abc.GuildChannel, after: discord.abc.GuildChannel) -> None:
        guild = after.guild
        if not self._takes(guild.id):
            return
        place = _place_of(guild.id, after.id)
        if before.name != after.name:
            self.feed.put(ChannelChange(kind="renamed", place=place, name=after.name))
        if before.overwrites != after.overwrites:
            self._facts.forget(str(guild.id), channel=str(after.id))
        # `after` is the cached channel, current by now: a quick second update is seen here already, once.
        self._follow_view(guild, after)

    async def on_guild_channel_delete(self, channel: discord.abc.GuildChannel) -> None:
        if self._takes(channel.guild.id):
            self.feed.put(ChannelChange(kind="left", place=_place_of(channel.guild.id, channel.id)))

    async def on_guild_remove(self, guild: discord.Guild) -> None:
        """Removed from a guild: every channel of it is left (guilds.py drops the team's pending work)."""
        for channel in guild.channels:
            self.feed.put(ChannelChange(kind="left", place=_place_of(guild.id, channel.id)))
        self._facts.forget(str(guild.id))

    async def on_member_update(self, before: discord.Member, after: discord.Member) -> None:
        """Someone's roles changed: their permissions are read again. Discord sends it for others only with the
        Server Members intent (without it the cache's minutes bound it); the bot's own roles changing can take
        channels from it, which are left."""
        if before.roles == after.roles:
            return
        self._facts.forget(str(after.guild.id), user=str(after.id))
        if after.id == self._me() and self._takes(after.guild.id):
            for channel in after.guild.channels:
                self._follow_view(after.guild, channel)

    async def on_raw_member_remove(self, payload: discord.RawMemberRemoveEvent) -> None:
        self._facts.forget(str(payload.guild_id), user=str(payload.user.id))

    async def on_guild_role_update(self, before: discord.Role, after: discord.Role) -> None:
        """A role's permissions changed: every member's are read again, and channels the bot lost with it are left."""
        if before.permissions == after.permissions:
            return
        guild = after.guild
        self._facts.forget(str(guild.id))
        if guild.me is not None and self._takes(guild.id):
            for channel in guild.channels:
                self._follow_view(guild, channel)

    def _follow_view(self, guild: discord.Guild, channel: discord.abc.GuildChannel) -> None:
        """`left` once when the bot may no longer view a channel (told again only after it could once more)."""
        if guild.me is None or channel.permissions_for(guild.me).view_channel:
            self._lost.discard(channel.id)
        elif channel.id not in self._lost:
            self._lost.add(channel.id)
            log.info("the bot may no longer view Discord channel %s: learning from it stops", channel.id)
            self.feed.put(ChannelChange(kind="left", place=_place_of(guild.id, channel.id)))

    def _deleted(self, guild_id: int | None, channel_id: int, message_ids: Any) -> None:
        if guild_id is None or not self._takes(guild_id):
            return
        ids = [str(message_id) for message_id in message_ids]
        self._put(guild_id, channel_id, lambda place: [
            ChannelChange(kind="deleted", place=place, message_id=message_id) for message_id in ids])

    def _put(self, guild_id: int, channel: Any, changes: Callable[[ChannelPlace], list[ChannelChange]]) -> None:
        """The event's changes, on the learned channel it is in; a channel not known here (a thread out of the
        cache: archived, or gone since) is looked up through the door first, in the feed's turn."""
        known, place = self._known_place(guild_id, channel)
        if known:
            for change in changes(place) if place is not None else ():
                self.feed.put(change)
            return
        channel_id = channel if isinstance(channel, int) else channel.id

        async def looked_up() -> list[ChannelChange]:
            known, found = self._known_place(guild_id, channel_id)  # an earlier event's look-up may have found it
            if not known:
                found = await self._look_up(guild_id, channel_id)
            return changes(found) if found is not None else []

        self.feed.put(looked_up)

    async def _look_up(self, guild_id: int, channel_id: int) -> ChannelPlace | None:
        try:
            data = await self._door.channel(channel_id)
        except (discord.NotFound, discord.Forbidden):
            return None  # gone, or the bot may not view it: nothing of it is learned
        kind = int(data.get("type") or 0)
        if kind not in THREAD_TYPES or not data.get("parent_id"):
            return _place_of(guild_id, channel_id)
        self._remember(channel_id, int(data["parent_id"]), private=kind == PRIVATE_THREAD_TYPE)
        return None if kind == PRIVATE_THREAD_TYPE else _place_of(guild_id, int(data["parent_id"]))

    def _takes(self, guild_id: int) -> bool:
        return self._gate.accepting and self._gate.allows(str(guild_id), quiet=True)

    def _me(self) -> int:
        client = self._client()
        return client.user.id if client is not None and client.user is not None else 0

    def _known_place(self, guild_id: int, channel: Any) -> tuple[bool, ChannelPlace | None]:
        """Whether the channel a message is in is known here (`channel`: the message's, as discord.py resolved it
        when the event came, or its id), and the learned channel it belongs to: a thread's is its parent; None for
        a private thread, never learned (only its members see it)."""
        thread = channel if isinstance(channel, discord.Thread) else None
        channel_id = channel if isinstance(channel, int) else channel.id
        if thread is None and channel_id not in self._threads:
            client = self._client()
            guild = client.get_guild(guild_id) if client is not None else None
            if guild is None:
                return True, _place_of(guild_id, channel_id)
            found = guild.get_channel_or_thread(channel_id)
            if found is None:
                return False, None
            thread = found if isinstance(found, discord.Thread) else None
        if thread is not None and thread.parent_id is not None:
            self._remember(thread.id, thread.parent_id, private=thread.type is discord.ChannelType.private_thread)
        parent, private = self._threads.get(channel_id, (channel_id, False))
        return True, None if private else _place_of(guild_id, parent)

    def _remember(self, thread: int, parent: int, *, private: bool) -> None:
        self._threads.pop(thread, None)
        self._threads[thread] = (parent, private)
        while len(self._threads) > THREADS_KEPT:
            self._threads.popitem(last=False)


def _in_thread(message: ChannelMessage, place: ChannelPlace, channel_id: int) -> ChannelMessage:
    """A message whose channel turned out to be a thread of `place` (looked up, not cached) is in that thread."""
    if message.thread or place.channel == str(channel_id):
        return message
    return dataclasses.replace(message, thread=str(channel_id))


def _place_of(guild_id: int, channel_id: int) -> ChannelPlace:
    return ChannelPlace(platform=PLATFORM, workspace=str(guild_id), channel=str(channel_id))


def _chained(first: Callable[..., Awaitable[None]] | None, then: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    if first is None:
        return then

    async def both(*args: Any) -> None:
        try:
            await first(*args)
        finally:
            try:
                await then(*args)
            except Exception:
                log.exception("learning could not follow a Discord event")

    return both
