"""Who can read what on Slack, for the visibility rule: a channel's place (public, shared, guests) and the channels a person shares with the bot.

`place` reads conversations.info (is_private, is_ext_shared / is_shared / is_org_shared, is_im / is_mpim) and,
for a channel that is not a DM, whether any member is a guest: conversations.members (paged) and users.info's
is_restricted / is_ultra_restricted per member (SlackPeople: cached per person). `readable_by` reads
users.conversations?user=U (paged): the public and private channels that person is in where the bot is too.
Both are cached for LEARN_MEMBERS_CACHE_S and forgotten on a member's joining or leaving. Every call goes through
SlackWeb.call on the workspace's budget for its method."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, TypeVar

from adapters.streaming.transport import PermanentSendError
from core.learning.model import Place

from .channel_people import SlackPeople
from .transport import SlackWeb

logger = logging.getLogger(__name__)

V = TypeVar("V")
Cache = OrderedDict[tuple[str, str], tuple[float, V]]

DEFAULT_CACHE_S = 300.0
PAGE_SIZE = 200
# A channel's members checked for guests at most (each a users.info the first time): past it, the channel is
# counted as having guests — the safe answer (no other channel's passages flow into it) — and logged.
GUEST_CHECK_MAX = 1_000
# How long a question waits (real seconds) for members' accounts not looked up yet; the channel counts as having
# guests meanwhile. The look-ups go on in the background (users.info, Tier 4), and are kept an hour.
GUEST_WAIT_S = 2.0
# A person's channels read at most this many pages (200 each).
MAX_PAGES = 50
ENTRIES_KEPT = 10_000
TYPES = "public_channel,private_channel"


class SlackChannelFacts:
    """Implements core.learning.ports.ChannelFacts for Slack."""

    def __init__(self, web: SlackWeb, people: SlackPeople, *, cache_s: float = DEFAULT_CACHE_S,
                 kept: int = ENTRIES_KEPT, guest_wait_s: float = GUEST_WAIT_S) -> None:
        self._web = web
        self._guest_wait_s = guest_wait_s
        self._people = people
        self._cache_s = cache_s
        self._kept = kept
        self._places: Cache[Place] = OrderedDict()
        self._readable: Cache[frozenset[str]] = OrderedDict()
        self._locks: dict[tuple[str, str, str], asyncio.Lock] = {}
        self._filling: dict[tuple[str, str], asyncio.Task[None]] = {}  # members' look-ups under way, per channel
        # Counts forgets: a read that was under way while one came is used once, not kept (it may be stale).
        self._forgotten = 0

    async def place(self, workspace: str, channel: str) -> Place:
        key = (workspace, channel)
        async with self._lock("place", key):
            found = self._fresh(self._places, key)
            if found is None:
                before = self._forgotten
                found, complete = await self._read_place(workspace, channel)
                if complete and before == self._forgotten:
                    self._keep(self._places, key, found)
            return found

    async def readable_by(self, workspace: str, user: str, channels: Sequence[str]) -> frozenset[str]:
        key = (workspace, user)
        async with self._lock("readable", key):
            listed = self._fresh(self._readable, key)
            if listed is None:
                before = self._forgotten
                listed = await self._read_channels(workspace, user)
                if before == self._forgotten:
                    self._keep(self._readable, key, listed)
        return frozenset(channel for channel in channels if channel in listed)

    async def close(self) -> None:
        """Members' look-ups still under way are cancelled."""
        tasks = [task for task in self._filling.values() if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=GUEST_WAIT_S)

    def forget(self, workspace: str, *, user: str = "", channel: str = "") -> None:
        """A person's channels (they joined or left one), a channel's place (its members or sharing changed)."""
        self._forgotten += 1
        if user:
            self._readable.pop((workspace, user), None)
        if channel:
            self._places.pop((workspace, channel), None)

    async def _read_place(self, workspace: str, channel: str) -> tuple[Place, bool]:
        """The channel's place, and whether it is complete (every member's account looked up) to be kept."""
        web = self._web
        info = await web.call(workspace, "conversations.info", budget=web.budgets.other(workspace, "conversations.info"),
                              channel=channel)
        conversation: dict[str, Any] = info.get("channel") or {}
        direct = bool(conversation.get("is_im") or conversation.get("is_mpim"))
        shared = bool(conversation.get("is_ext_shared") or conversation.get("is_shared") or conversation.get("is_org_shared"))
        public = not direct and not conversation.get("is_private")
        guests = False if conversation.get("is_im") else await self._has_guests(workspace, channel)
        # Not known yet counts as guests: no other channel's passages flow into it meanwhile (never kept so).
        return Place(public=public, has_guests=guests is not False, shared=shared, direct=direct), guests is not None

    async def _has_guests(self, workspace: str, channel: str) -> bool | None:
        """Whether a member is a guest; None while some members' accounts are still being looked up (past
        GUEST_WAIT_S: the answer waits no longer; the look-ups go on, and a later question gets the answer)."""
        members = await self._members(workspace, channel)
        if len(members) > GUEST_CHECK_MAX:
            logger.info("%s has over %d members: counted as having guests", channel, GUEST_CHECK_MAX)
            return True
        known = [self._people.known(workspace, member) for member in members]
        if any(person is not None and person.guest for person in known):
            return True
        unknown = [member for member, person in zip(members, known) if person is None]
        if not unknown:
            return False
        key = (workspace, channel)
        task = self._filling.get(key)
        if task is None or task.done():
            task = self._filling[key] = asyncio.get_running_loop().create_task(self._fill(workspace, unknown))
            task.add_done_callback(lambda done: self._filled(key, done))
        finished, _ = await asyncio.wait({task}, timeout=self._guest_wait_s)
        if not finished:
            return None
        return any(person.guest for member in members if (person := self._people.known(workspace, member)) is not None)

    async def _fill(self, workspace: str, users: list[str]) -> None:
        await asyncio.gather(*(self._people.person(workspace, user) for user in users))

    def _filled(self, key: tuple[str, str], task: asyncio.Task[None]) -> None:
        if self._filling.get(key) is task:
            del self._filling[key]
        if not task.cancelled() and (error := task.exception()) is not None:
            logger.warning("could not look up the members of %s: %r", key[1], error)

    async def _members(self, workspace: str, channel: str) -> list[str]:
        budget = self._web.budgets.other(workspace, "conversations.members")
        members: list[str] = []
        cursor = ""
        while len(members) <= GUEST_CHECK_MAX:
            page = {"channel": channel, "limit": PAGE_SIZE, **({"cursor": cursor} if cursor else {})}
            response = await self._web.call(workspace, "conversations.members", budget=budget, **page)
            members += [str(m) for m in response.get("members") or ()]
            cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                break
        return members

    async def _read_channels(self, workspace: str, user: str) -> frozenset[str]:
        budget = self._web.budgets.other(workspace, "users.conversations")
        found: set[str] = set()
        cursor = ""
        for _ in range(MAX_PAGES):
            page = {"user": user, "types": TYPES, "limit": PAGE_SIZE, **({"cursor": cursor} if cursor else {})}
            try:
                response = await self._web.call(workspace, "users.conversations", budget=budget, **page)
            except PermanentSendError as exc:
                if getattr(exc, "code", "") == "user_not_found":  # a deleted account, another organisation's
                    return frozenset()
                raise
            found.update(str(c["id"]) for c in response.get("channels") or () if isinstance(c, dict) and c.get("id"))
            cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                break
        return frozenset(found)

    def _lock(self, kind: str, key: tuple[str, str]) -> asyncio.Lock:
        """One read per entry at a time: answers asked together share it. Locks go with their entries' bound."""
        name = (kind, *key)
        if name not in self._locks:
            if len(self._locks) > self._kept:
                for stale in [n for n, lock in self._locks.items() if not lock.locked()]:
                    del self._locks[stale]
            self._locks[name] = asyncio.Lock()
        return self._locks[name]

    def _fresh(self, cache: Cache[V], key: tuple[str, str]) -> V | None:
        entry = cache.get(key)
        if entry is None or self._web.clock.now() - entry[0] > self._cache_s:
            return None
        return entry[1]

    def _keep(self, cache: Cache[V], key: tuple[str, str], value: V) -> None:
        cache[key] = (self._web.clock.now(), value)
        cache.move_to_end(key)
        while len(cache) > self._kept:
            cache.popitem(last=False)
