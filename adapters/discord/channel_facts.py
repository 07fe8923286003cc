"""Who can read what on Discord (core.learning.ports.ChannelFacts): @everyone's view of a channel, and a member's permissions per channel from the gateway's cached guild, the member read through the door and cached."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

import discord

from adapters.streaming import Priority
from core.learning.model import Place

from .transport_history import HistoryDoor, member_of

log = logging.getLogger(__name__)

MEMBERS_CACHE_S = 300.0
MEMBERS_CACHE_MAX = 10_000


class DiscordChannelFacts:
    """Implements core.learning.ports.ChannelFacts. The bot has no members intent, so a member is read over REST
    (GET /guilds/{id}/members/{user}) and believed for `cache_s` (LEARN_MEMBERS_CACHE_S); channels and roles come
    from the gateway's cache, which Discord keeps current, so an overwrite changed counts at once."""

    def __init__(
        self, *, client: Callable[[], discord.Client | None], door: HistoryDoor, cache_s: float = MEMBERS_CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._door = door
        self._cache_s = cache_s
        self._clock = clock
        # (guild, user) → (believed until, the member, None when not in the guild); oldest first.
        self._members: OrderedDict[tuple[str, str], tuple[float, discord.Member | None]] = OrderedDict()

    async def place(self, workspace: str, channel: str) -> Place:
        if not workspace.isdigit():
            return Place(public=False, direct=True)
        found = self._channel(workspace, channel)
        if found is None:
            # Not in the cache (not served by this process, or gone): nobody but its own channel gets its passages.
            return Place(public=False)
        guild, where = found
        return Place(public=where.permissions_for(guild.default_role).view_channel)

    async def readable_by(self, workspace: str, user: str, channels: Sequence[str]) -> frozenset[str]:
        if not workspace.isdigit() or not user.isdigit() or not channels:
            return frozenset()
        member = await self._member(workspace, user)
        if member is None:
            return frozenset()
        readable: set[str] = set()
        for channel in channels:
            found = self._channel(workspace, channel)
            if found is None:
                continue
            allowed = found[1].permissions_for(member)
            if allowed.view_channel and allowed.read_message_history:
                readable.add(channel)
        return frozenset(readable)

    def forget(self, workspace: str, *, user: str = "", channel: str = "") -> None:
        """A person: their member is read again. A channel: nothing is cached of it (its overwrites are the
        gateway's, current). Neither: the whole guild's members (a role's permissions changed)."""
        if user:
            self._members.pop((workspace, user), None)
        elif not channel:
            for key in [key for key in self._members if key[0] == workspace]:
                del self._members[key]

    def _channel(self, workspace: str, channel: str) -> tuple[discord.Guild, discord.abc.GuildChannel] | None:
        client = self._client()
        guild = client.get_guild(int(workspace)) if client is not None else None
        if guild is None or not channel.isdigit():
            return None
        where = guild.get_channel_or_thread(int(channel))
        if isinstance(where, discord.Thread):
            # A public thread is seen by whoever sees its channel.
            where = where.parent
        return (guild, where) if isinstance(where, discord.abc.GuildChannel) else None

    async def _member(self, workspace: str, user: str) -> discord.Member | None:
        now = self._clock()
        known = self._members.get((workspace, user))
        if known is not None and known[0] > now:
            return known[1]
        client = self._client()
        guild = client.get_guild(int(workspace)) if client is not None else None
        if guild is None:
            return None
        data = await self._door.member(guild.id, int(user), priority=Priority.FIRST)
        member = member_of(guild, data) if data is not None else None
        self._remember((workspace, user), member, now)
        return member

    def _remember(self, key: tuple[str, str], member: discord.Member | None, now: float) -> None:
        self._members.pop(key, None)
        self._members[key] = (now + self._cache_s, member)
        while self._members:
            until, _ = next(iter(self._members.values()))
            if until > now and len(self._members) <= MEMBERS_CACHE_MAX:
                break
            self._members.popitem(last=False)
