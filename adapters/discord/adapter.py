"""DiscordAdapter: connects discord.py to the engine; start, stop taking events, interrupt, close."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import aiohttp
import discord
import discord.gateway
import discord.http
import yarl

from adapters.streaming import Clock, MonotonicClock
from core.config import Settings
from core.engine import Engine
from core.store.db import Database
from core.store.live_messages import LiveMessages
from core.store.processed_events import ProcessedEvents

from . import rendering
from .answer import PLATFORM, AnswerStreams
from .clicks import ClickHandler
from .client import RelayClient
from .gate import Gate
from .handlers import Handlers
from .notifier import DiscordNotifier
from .transport import DISCORD_WINDOW_S, NO_PINGS, ChannelBudgets

log = logging.getLogger(__name__)

DEFAULT_API_BASE = "https://discord.com/api/v10"
READY_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 10.0
DOCTOR_TIMEOUT_S = 10.0


@dataclass(frozen=True, kw_only=True)
class DiscordTuning:
    """Timing knobs; tests and the bench scale them together with the emulator's windows."""

    guild_ready_timeout_s: float = 2.0  # discord.py waits this long for GUILD_CREATEs before on_ready
    budget_window_s: float = DISCORD_WINDOW_S  # the window discord_channel_budget_per_5s spreads over
    min_edit_interval_s: float = 1.0
    backoff_base_s: float = 0.5
    ready_timeout_s: float = READY_TIMEOUT_S


def apply_endpoints(settings: Settings) -> None:
    """Points discord.py at another REST base and gateway (Discord-compatible servers, emulators)."""
    if settings.discord_api_base:
        discord.http.Route.BASE = settings.discord_api_base.rstrip("/")
    if settings.discord_gateway_url:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(settings.discord_gateway_url)


class DiscordAdapter:
    """The Discord platform adapter (adapters/base.py PlatformAdapter)."""

    platform = PLATFORM

    def __init__(
        self,
        *,
        settings: Settings,
        engine: Engine,
        db: Database,
        tuning: DiscordTuning = DiscordTuning(),
        clock: Clock | None = None,
    ) -> None:
        if not settings.discord_token:
            raise ValueError("DISCORD_TOKEN is not set")
        self._settings = settings
        self._engine = engine
        self._tuning = tuning
        self._clock: Clock = clock or MonotonicClock()
        self._live = LiveMessages(db)
        self.budgets = ChannelBudgets(
            calls_per_window=settings.discord_channel_budget_per_5s, window_s=tuning.budget_window_s, clock=self._clock
        )
        self.gate = Gate(guild_ids=settings.discord_guild_ids)
        limits = rendering.stream_limits(
            min_edit_interval_s=tuning.min_edit_interval_s, backoff_base_s=tuning.backoff_base_s
        )
        self.streams = AnswerStreams(engine=engine, live=self._live, budgets=self.budgets, limits=limits, clock=self._clock)
        self.client = RelayClient(
            handlers=Handlers(
                settings=settings, engine=engine, streams=self.streams, gate=self.gate, processed=ProcessedEvents(db)
            ),
            clicks=ClickHandler(engine=engine, streams=self.streams, budgets=self.budgets, gate=self.gate, clock=self._clock),
            message_content=settings.discord_message_content_intent,
            guild_ready_timeout_s=tuning.guild_ready_timeout_s,
        )
        self.notifier = DiscordNotifier(client=lambda: self.client, budgets=self.budgets, clock=self._clock)
        self._connection: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Logs in, marks answers a crash left streaming as interrupted, then connects the gateway."""
        apply_endpoints(self._settings)
        assert self._settings.discord_token
        await self.client.login(self._settings.discord_token)
        await self._mark_interrupted()
        self._connection = asyncio.create_task(self.client.connect(reconnect=True), name="discord-gateway")
        ready = asyncio.create_task(self.client.wait_until_ready())
        done, _ = await asyncio.wait(
            {ready, self._connection}, timeout=self._tuning.ready_timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if ready not in done:
            ready.cancel()
            if self._connection in done:
                self._connection.result()  # raises the connection's error
            raise TimeoutError(f"Discord did not become ready within {self._tuning.ready_timeout_s:g} s")
        log.info("Discord connected as %s", self.client.user)

    async def stop_accepting(self) -> None:
        self.gate.accepting = False

    async def interrupt_inflight(self) -> None:
        await self.streams.interrupt_all()

    async def close(self) -> None:
        self.gate.accepting = False
        tasks = [task for task in self.gate.tasks if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT_S)
        await self.client.close()
        if self._connection is not None:
            try:
                await asyncio.wait_for(self._connection, CLOSE_TIMEOUT_S)
            except (asyncio.TimeoutError, asyncio.CancelledError, discord.DiscordException, OSError):
                log.info("Discord gateway task ended during close", exc_info=True)
            self._connection = None

    async def _mark_interrupted(self) -> None:
        for live in await self._live.take_all(PLATFORM):
            message = self.client.get_partial_messageable(int(live.channel)).get_partial_message(int(live.message_id))
            try:
                shown = (await message.fetch()).content
                await message.edit(content=rendering.interrupted_text(shown), allowed_mentions=NO_PINGS)
            except discord.HTTPException as exc:
                log.warning("could not mark message %s as interrupted: %s", live.message_id, exc)


async def check_discord(settings: Settings) -> str:
    """One line for `relaybot doctor`: does Discord accept the bot token?"""
    if not settings.discord_token:
        return "Discord: not configured (DISCORD_TOKEN is not set)."
    base = (settings.discord_api_base or DEFAULT_API_BASE).rstrip("/")
    headers = {"Authorization": f"Bot {settings.discord_token}"}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DOCTOR_TIMEOUT_S)) as http:
            async with http.get(f"{base}/users/@me", headers=headers) as response:
                if response.status == 401:
                    return "Discord: FAILED — the bot token was rejected (401); copy it again from the Bot page."
                if response.status != 200:
                    return f"Discord: FAILED — {base}/users/@me answered HTTP {response.status}."
                me = await response.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        return f"Discord: FAILED — cannot reach {base} ({exc.__class__.__name__})."
    return f"Discord: OK — logged in as {me.get('username', '?')} (id {me.get('id', '?')})."
