"""The door for the CLI's Discord reads without a gateway session: a REST-only client whose every call (its login,
a guild's channels and members, the bot's guilds) is paced on the bot-wide budget and read by the shared rule.

Nothing else calls these discord.py REST methods (tests/test_architecture.py and tests/support/platform_door.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import discord

from adapters.streaming import Clock, MonotonicClock, Priority, RateBudget
from adapters.streaming.send import send_paced

from .settings import DiscordSettings
from .transport import DISCORD_WINDOW_S, DiscordBudgets
from .transport_http import guarded, no_blind_resend

T = TypeVar("T")
# Discord's most members in one page of GET /guilds/{id}/members, and the bot's guilds in one page.
MEMBERS_PAGE = 1000
GUILDS_PAGE = 200
# Tries of one read (429s and failures alike): a command waits for names a little, not as a delivery would.
READ_ATTEMPTS = 3
# A 429 longer than this is not slept out inside discord.py: it comes back as RateLimited, to the budget.
MAX_RATELIMIT_WAIT_S = 5.0


def cli_pacing(group: DiscordSettings) -> tuple[RateBudget, Clock]:
    """The CLI's pacing over REST alone: the endpoint applied as adapter.apply_endpoints does (without loading the
    adapter: a Discord-compatible server, an emulator), and the bot-wide budget its calls go on."""
    if group.api_base:
        discord.http.Route.BASE = group.api_base.rstrip("/")
    clock = MonotonicClock()
    budgets = DiscordBudgets(calls_per_window=group.channel_budget_per_5s, window_s=DISCORD_WINDOW_S, clock=clock,
                             global_calls=group.global_requests_per_s)
    assert budgets.global_budget is not None
    return budgets.global_budget, clock


class DirectoryDoor:
    """One command's Discord reads: logged in on `open`, closed on `close`."""

    def __init__(self, *, token: str, budget: RateBudget, clock: Clock) -> None:
        self._token = token
        self._budget = budget
        self._clock = clock
        self._http: discord.http.HTTPClient | None = None

    async def open(self) -> None:
        """Logs in (GET /users/@me); a refused token raises discord.LoginFailure."""
        self._http = discord.http.HTTPClient(
            asyncio.get_running_loop(), http_trace=no_blind_resend(aiohttp.TraceConfig()),
            max_ratelimit_timeout=MAX_RATELIMIT_WAIT_S,
        )
        http = self._http
        await self._paced(lambda: http.static_login(self._token))

    async def channels(self, guild_id: int) -> list[dict[str, Any]]:
        http = self._open()
        return list(await self._paced(lambda: http.get_all_guild_channels(guild_id)))

    async def members(self, guild_id: int, *, after: int) -> list[dict[str, Any]]:
        """One page of the guild's members, those with ids past `after` (needs the Server Members intent)."""
        http = self._open()
        return list(await self._paced(lambda: http.get_members(guild_id, MEMBERS_PAGE, after or None)))

    async def guilds(self) -> list[dict[str, Any]]:
        http = self._open()
        return list(await self._paced(lambda: http.get_guilds(GUILDS_PAGE, with_counts=False)))

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _open(self) -> discord.http.HTTPClient:
        if self._http is None:
            raise RuntimeError("DirectoryDoor.open() first")
        return self._http

    async def _paced(self, make_call: Callable[[], Awaitable[T]]) -> T:
        # Behind the answers of a running bot in the same budget's terms: a command can wait.
        return await send_paced(lambda: guarded(make_call()), budget=self._budget, clock=self._clock,
                                priority=Priority.INTERMEDIATE, attempts=READ_ATTEMPTS)
