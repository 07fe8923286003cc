"""The door for learning's Discord reads: a channel, its messages, its public threads (active and archived), the guild and a member, each call on the bot-wide budget.

Nothing else calls these discord.py REST methods (tests/test_architecture.py and tests/support/platform_door.py).
The same door serves the running bot (its gateway client's HTTP) and the CLI (a REST-only client, `open_rest`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import discord

from adapters.streaming import Clock, Priority, RateBudget
from adapters.streaming.send import send_paced

from .transport_http import guarded, no_blind_resend

T = TypeVar("T")
JSON = dict[str, Any]
# Discord's most messages in one page of GET /channels/{id}/messages, and archived threads in one page.
MESSAGES_PAGE = 100
ARCHIVED_PAGE = 100
# A read waits out 429s and failures a few times: a backfill is resumed later if Discord stays unwell.
READ_ATTEMPTS = 6
# A 429 longer than this is not slept out inside discord.py: it comes back as RateLimited, to the budget.
MAX_RATELIMIT_WAIT_S = 5.0


class HistoryDoor:
    """Learning's reads on the bot-wide budget (Discord counts them with the rest), behind the answers (INTERMEDIATE)
    unless an answer waits on one."""

    def __init__(
        self, *, http: Callable[[], Awaitable[discord.http.HTTPClient]], budget: RateBudget | None, clock: Clock
    ) -> None:
        self._http = http
        self._budget = budget
        self._clock = clock

    async def channel(self, channel_id: int) -> JSON:
        return dict(await self._paced(lambda http: http.get_channel(channel_id)))

    async def guild(self, guild_id: int) -> JSON:
        """The guild with its roles and owner (what a channel's permissions are computed from)."""
        return dict(await self._paced(lambda http: http.get_guild(guild_id, with_counts=False)))

    async def member(self, guild_id: int, user_id: int, *, priority: Priority = Priority.INTERMEDIATE) -> JSON | None:
        """The member with their roles, None when they are not in the guild (404). An answer waiting on it (who may
        read what) asks with FIRST: it stands before the answer's first text."""
        try:
            return dict(await self._paced(lambda http: http.get_member(guild_id, user_id), priority=priority))
        except discord.NotFound:
            return None

    async def application_flags(self) -> int:
        """The application's flags (GET /applications/@me): whether the Message Content intent is on in the Portal."""
        info = await self._paced(lambda http: http.application_info())
        return int(info.get("flags") or 0)

    async def messages(self, channel_id: int, *, before: int | None = None, after: int | None = None) -> list[JSON]:
        """One page of up to 100 messages, newest first: before `before`, or the oldest ones after `after`."""
        return list(await self._paced(
            lambda http: http.logs_from(channel_id, MESSAGES_PAGE, before=before, after=after)))

    async def message(self, channel_id: int, message_id: int) -> JSON | None:
        """One message, None when it is not there (deleted, or never was)."""
        try:
            return dict(await self._paced(lambda http: http.get_message(channel_id, message_id)))
        except discord.NotFound:
            return None

    async def active_threads(self, guild_id: int) -> list[JSON]:
        """Every active thread of the guild the bot can see (GET /guilds/{id}/threads/active)."""
        page = await self._paced(lambda http: http.get_active_threads(guild_id))
        return list(page.get("threads") or [])

    async def archived_threads(self, channel_id: int, *, before: str | None) -> tuple[list[JSON], bool]:
        """One page of the channel's archived public threads, newest archived first, before the ISO time `before`;
        and whether more follow (`has_more`). Private ones are not read (adapters/discord/channel_history.py)."""
        page = await self._paced(lambda http: http.get_public_archived_threads(channel_id, before, ARCHIVED_PAGE))
        return list(page.get("threads") or []), bool(page.get("has_more"))

    async def _paced(
        self, call: Callable[[discord.http.HTTPClient], Awaitable[T]], *, priority: Priority = Priority.INTERMEDIATE,
    ) -> T:
        http = await self._http()
        if self._budget is None:
            return await guarded(call(http))
        return await send_paced(lambda: guarded(call(http)), budget=self._budget, clock=self._clock,
                                priority=priority, attempts=READ_ATTEMPTS)


class RestClient:
    """A REST-only discord.py HTTP client for the CLI (no gateway): logged in on first use, closed by `close`."""

    def __init__(self, *, token: str, budget: RateBudget, clock: Clock) -> None:
        self._token = token
        self.budget = budget
        self.clock = clock
        self.user_id: int | None = None  # the bot's, once logged in
        self._http: discord.http.HTTPClient | None = None
        self._lock = asyncio.Lock()

    async def opened(self) -> discord.http.HTTPClient:
        async with self._lock:
            if self._http is None:
                http = discord.http.HTTPClient(
                    asyncio.get_running_loop(), http_trace=no_blind_resend(aiohttp.TraceConfig()),
                    max_ratelimit_timeout=MAX_RATELIMIT_WAIT_S,
                )
                me = await send_paced(lambda: guarded(http.static_login(self._token)), budget=self.budget,
                                      clock=self.clock, priority=Priority.INTERMEDIATE, attempts=3)
                self.user_id = int(me["id"])
                self._http = http
            return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None


def member_of(guild: discord.Guild, data: JSON) -> discord.Member:
    """A member read over REST, bound to the gateway's cached guild so its permissions can be computed there."""
    return discord.Member(data=data, guild=guild, state=guild._state)  # type: ignore[arg-type]
