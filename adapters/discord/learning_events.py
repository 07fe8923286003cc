"""Discord's live events made learning's ChannelChanges (new, edited and deleted messages, renames, channels and threads gone, the bot removed), handed to the engine in order by one background worker off the answer path."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import discord

from adapters.gate import Gate
from core.learning.model import ChannelChange, ChannelPlace
from core.learning.ports import ChannelLearning

from .channel_facts import DiscordChannelFacts
from .learning_messages import PERSON_TYPES, from_message
from .surface import PLATFORM

log = logging.getLogger(__name__)

# Changes waiting for the engine: past this many, new ones are dropped (and logged); the catch-up's re-scan
# after a restart is what finds them again.
FEED_MAX = 10_000
THREADS_KEPT = 10_000


class LearningFeed:
    """One queue and one worker task: changes reach `take` in the order Discord sent them (an edit never before
    its message), and a failing one is logged and the next taken."""

    def __init__(self, learning: Callable[[], ChannelLearning | None], *, max_queued: int = FEED_MAX) -> None:
        self._learning = learning
        self._queue: asyncio.Queue[ChannelChange] = asyncio.Queue(max_queued)
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self.dropped = 0

    def put(self, change: ChannelChange) -> None:
        if self._closed or self._learning() is None:
            return
        try:
            self._queue.put_nowait(change)
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("learning from Discord is %d changes behind: a %s of channel %s is dropped (the next catch-up "
                        "re-reads it)", self._queue.qsize(), change.kind, change.place.channel)
            return
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name="discord-learning-feed")

    async def drained(self) -> None:
        """Every change put so far has been taken (tests, and a graceful close)."""
        await self._queue.join()

    async def _work(self) -> None:
        while True:
            change = await self._queue.get()
            try:
                learning = self._learning()
                if learning is not None:
                    await learning.take(change)
            except Exception:
                log.exception("learning could not take a %s of Discord channel %s", change.kind, change.place.key)
            finally:
                self._queue.task_done()

    async def close(self) -> None:
        """Changes still queued are dropped: the next start's catch-up re-reads what they were about."""
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None


class DiscordLearningEvents:
    """The client's handlers for what learning hears; each only puts changes on the feed (never awaits the engine)."""

    def __init__(
        self, *, client: Callable[[], discord.Client | None], feed: LearningFeed, facts: DiscordChannelFacts, gate: Gate,
    ) -> None:
        self._client = client
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
        place = self._place(message.guild.id, message.channel)
        if place is not None:
            self.feed.put(ChannelChange(kind="message", place=place, message=from_message(message, me=self._me())))

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        message = payload.message
        if payload.guild_id is None or message.type.value not in PERSON_TYPES or not self._takes(payload.guild_id):
            return
        place = self._place(payload.guild_id, message.channel)
        if place is not None:
            self.feed.put(ChannelChange(kind="message", place=place, message=from_message(message, me=self._me())))

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        self._deleted(payload.guild_id, payload.channel_id, (payload.message_id,))

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        self._deleted(payload.guild_id, payload.channel_id, sorted(payload.message_ids))

    async def on_raw_thread_delete(self, payload: discord.RawThreadDeleteEvent) -> None:
        """A thread deleted: its root is deleted (the thread has the root's id); the engine drops the thread's
        document with it, replies included."""
        if self._takes(payload.guild_id) and payload.thread_type is not discord.ChannelType.private_thread:
            self.feed.put(ChannelChange(kind="deleted", place=_place_of(payload.guild_id, payload.parent_id),
                                        message_id=str(payload.thread_id)))

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
        if guild.me is None or after.permissions_for(guild.me).view_channel:
            self._lost.discard(after.id)
        elif after.id not in self._lost:
            self._lost.add(after.id)
            log.info("the bot may no longer view Discord channel %s: learning from it stops", after.id)
            self.feed.put(ChannelChange(kind="left", place=place))

    async def on_guild_channel_delete(self, channel: discord.abc.GuildChannel) -> None:
        if self._takes(channel.guild.id):
            self.feed.put(ChannelChange(kind="left", place=_place_of(channel.guild.id, channel.id)))

    async def on_guild_remove(self, guild: discord.Guild) -> None:
        """Removed from a guild: every channel of it is left (guilds.py drops the team's pending work)."""
        for channel in guild.channels:
            self.feed.put(ChannelChange(kind="left", place=_place_of(guild.id, channel.id)))
        self._facts.forget(str(guild.id))

    async def on_member_update(self, before: discord.Member, after: discord.Member) -> None:
        # Only with the Server Members intent does Discord send this; without it the cache's minutes bound it.
        if before.roles != after.roles:
            self._facts.forget(str(after.guild.id), user=str(after.id))

    async def on_raw_member_remove(self, payload: discord.RawMemberRemoveEvent) -> None:
        self._facts.forget(str(payload.guild_id), user=str(payload.user.id))

    async def on_guild_role_update(self, before: discord.Role, after: discord.Role) -> None:
        if before.permissions != after.permissions:
            self._facts.forget(str(after.guild.id))

    def _deleted(self, guild_id: int | None, channel_id: int, message_ids: Any) -> None:
        if guild_id is None or not self._takes(guild_id):
            return
        place = self._place(guild_id, channel_id)
        if place is not None:
            for message_id in message_ids:
                self.feed.put(ChannelChange(kind="deleted", place=place, message_id=str(message_id)))

    def _takes(self, guild_id: int) -> bool:
        return self._gate.accepting and self._gate.allows(str(guild_id), quiet=True)

    def _me(self) -> int:
        client = self._client()
        return client.user.id if client is not None and client.user is not None else 0

    def _place(self, guild_id: int, channel: Any) -> ChannelPlace | None:
        """The learned channel a message is in (`channel`: the message's, as discord.py resolved it when the event
        came, or its id): a thread's is its parent. None for a private thread, never learned (its members only see
        it). A thread known neither then nor since counts as a channel of its own (nobody chose it)."""
        thread = channel if isinstance(channel, discord.Thread) else None
        channel_id = channel if isinstance(channel, int) else channel.id
        if thread is None:
            client = self._client()
            guild = client.get_guild(guild_id) if client is not None else None
            thread = guild.get_thread(channel_id) if guild is not None else None
        if thread is not None:
            self._threads[thread.id] = (thread.parent_id, thread.type is discord.ChannelType.private_thread)
            while len(self._threads) > THREADS_KEPT:
                self._threads.popitem(last=False)
        parent, private = self._threads.get(channel_id, (channel_id, False))
        return None if private else _place_of(guild_id, parent)


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
