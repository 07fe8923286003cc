"""DiscordAdapter: the discord.py client and the adapter's lifecycle (start, stop taking events, interrupt, close, readiness)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
import discord
import discord.gateway
import discord.http
import yarl
from discord import app_commands

from adapters.answers import AnswerRunner
from adapters.base import AdapterPorts
from core.ports import AppState
from adapters.gate import Gate
from adapters.streaming import Clock, MonotonicClock
from core import metrics, observe
from core.config import Settings
from core.engine import Engine

from . import render
from .admin import DiscordAdmin, command_group
from .buttons import ArgumentsButton, DecisionButton
from .clicks import DiscordClicks
from .controls import DiscordStops, StopButton
from .feedback import DiscordFeedback, FeedbackButton
from .guilds import DiscordGuilds
from .commands import DiscordCommands
from .inbound import DiscordAccess, DiscordInbound, actor_of
from .learning_parts import learning_parts, learning_port
from .notifier import DiscordNotifier
from .reader import DiscordReader
from .settings import DiscordSettings
from .shards import (RECONNECT_GRACE_S, GatewayWatch, PacedIdentify, RetiredClients, ShardKeeper, ShardLeasePort, Shards,
                     close_left_sockets, shard_plan, tolerate_malformed_events)
from .surface import PLATFORM, DiscordFinalDelivery, DiscordShownMessages, DiscordSurfaces
from . import transport_calls as calls
from .transport import DISCORD_WINDOW_S, DiscordBudgets, bot_key, watch_global_lock
from .transport_http import no_blind_resend

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 10.0
_ID = re.compile(r"/\d+")


@dataclass(frozen=True, kw_only=True)
class DiscordTuning:
    """Timing knobs; tests and the bench scale them together with the emulator's windows."""

    guild_ready_timeout_s: float = 2.0  # discord.py waits this long for GUILD_CREATEs before on_ready
    budget_window_s: float = DISCORD_WINDOW_S  # the window discord_channel_budget_per_5s spreads over
    min_edit_interval_s: float = 1.0
    backoff_base_s: float = 0.5
    ready_timeout_s: float = READY_TIMEOUT_S
    global_window_s: float = 1.0  # the window of Discord's per-bot global limit


def apply_endpoints(settings: Settings) -> None:
    """Points discord.py at another REST base and gateway (Discord-compatible servers, emulators)."""
    group = settings.platform_settings(DiscordSettings)
    if group.api_base:
        discord.http.Route.BASE = group.api_base.rstrip("/")
    if group.gateway_url:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(group.gateway_url)


def intents_for(*, message_content: bool) -> discord.Intents:
    intents = discord.Intents.default()
    # Privileged: without it Discord blanks guild messages that do not mention the bot.
    intents.message_content = message_content
    return intents


def rate_limit_trace() -> aiohttp.TraceConfig:
    """Counts every 429 discord.py receives (it waits them out itself, so our code never sees most of them),
    by HTTP method and route, ids left out."""

    async def on_request_end(session: aiohttp.ClientSession, context: SimpleNamespace, params: aiohttp.TraceRequestEndParams) -> None:
        if params.response.status == 429:
            metrics.record_rate_limited(platform=PLATFORM, method=f"{params.method} {_ID.sub('/{id}', params.url.path)}")

    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(on_request_end)
    return trace


class RelayClient(discord.Client):
    """Routes messages to DiscordInbound, /ask to DiscordCommands and clicks to DiscordClicks, and tells the GatewayWatch."""

    def __init__(
        self, *, inbound: DiscordInbound, commands: DiscordCommands, clicks: DiscordClicks, message_content: bool,
        guild_ready_timeout_s: float, watch: GatewayWatch, state: AppState, **sharding: Any,
    ) -> None:
        super().__init__(
            **sharding,
            intents=intents_for(message_content=message_content),
            allowed_mentions=discord.AllowedMentions.none(),
            guild_ready_timeout=guild_ready_timeout_s,
            # No message cache: nothing reads it (replies and edits use partial messages); full collections walked it.
            max_messages=None,
            # A POST is sent once: its 5xx or lost reply is looked up, not re-sent (transport_http.py).
            http_trace=no_blind_resend(rate_limit_trace()),
        )
        tolerate_malformed_events(self._connection.parsers)
        self.watch = watch
        self.state = state
        self.inbound = inbound
        # Read by the buttons at click time (buttons.DecisionButton), so they need not import the handler.
        self.clicks = clicks
        self.tree = app_commands.CommandTree(self)
        commands.add_to(self.tree)

    async def setup_hook(self) -> None:
        # Registered at every start, so buttons posted before a restart still work.
        self.add_dynamic_items(DecisionButton, ArgumentsButton, StopButton, FeedbackButton)
        await self._sync_commands()

    async def _sync_commands(self) -> None:
        """Registers the app commands only when their definition changed: the endpoint is rate-limited,
        and a redeploy of the same code has nothing new to say."""
        definition = json.dumps([command.to_dict(self.tree) for command in self.tree.get_commands()], sort_keys=True)
        digest = hashlib.sha256(definition.encode()).hexdigest()
        key = f"discord.commands.{self.application_id}"
        try:
            if await self.state.get(key) == digest:
                log.info("Discord commands unchanged; not syncing them")
                return
            await calls.sync_commands(self.tree)
            await self.state.put(key, digest)
        except discord.HTTPException:
            log.exception("could not register the /ask command")
        except Exception:
            # The database is not needed to answer: a sync that cannot be remembered is tried next start.
            log.exception("could not check or remember the Discord commands' definition")

    async def on_message(self, message: discord.Message) -> None:
        learning = getattr(self, "learning", None)  # every guild message, before the answer path (it only queues)
        if learning is not None:
            learning.on_message(message)
        if self.user is not None:
            await self.inbound.on_message(self.user, message)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        # A 👎 modal's submission, taken by its custom_id (adapters/discord/feedback.py): also after a restart.
        feedback: DiscordFeedback | None = getattr(self, "feedback", None)
        if feedback is not None:
            await feedback.on_interaction(interaction)

    async def on_ready(self) -> None:
        self.watch.up()

    async def on_resumed(self) -> None:
        self.watch.up()

    async def on_disconnect(self) -> None:
        self.watch.down()


class ShardedRelayClient(PacedIdentify, RelayClient, discord.AutoShardedClient):
    """A RelayClient running the shards it is given (shard_count, shard_ids): fixed once it connects; its shards
    identify as fast as the bot's max_concurrency lets them."""


class DiscordAdapter:
    """The Discord platform adapter (adapters/base.py PlatformAdapter)."""

    platform = PLATFORM

    def __init__(
        self,
        *,
        settings: Settings,
        engine: Engine,
        ports: AdapterPorts,
        tuning: DiscordTuning = DiscordTuning(),
        clock: Clock | None = None,
    ) -> None:
        self._discord = settings.platform_settings(DiscordSettings)
        if not self._discord.token:
            raise ValueError("DISCORD_TOKEN is not set")
        self._settings = settings
        self._tuning = tuning
        self._clock: Clock = clock or MonotonicClock()
        self._plan = shard_plan(self._discord)  # DISCORD_SHARD_COUNT / _IDS; leases come from use_shard_leases
        self._shards = ShardKeeper(self._plan)
        self._engine, self._ports = engine, ports
        self._retired = RetiredClients(answering=lambda: self.runner.inflight, grace_s=settings.shutdown_grace_s,
                                       close_timeout_s=CLOSE_TIMEOUT_S, clock=self._clock)
        self.budgets = DiscordBudgets(
            calls_per_window=self._discord.channel_budget_per_5s, window_s=tuning.budget_window_s, clock=self._clock,
            global_calls=self._discord.global_requests_per_s, global_window_s=tuning.global_window_s, bot=bot_key(self._discord.token),
        )
        self.gate = Gate(
            platform=PLATFORM, allowed_workspaces=self._discord.guild_ids, setting="DISCORD_GUILD_IDS", dedup=ports.dedup,
        )
        self.runner = AnswerRunner(
            platform=PLATFORM, approvals=engine.approvals, live=ports.live, outbox=ports.outbox,
            outbox_max_age_s=settings.outbox_max_age_s, in_flight_max=settings.answers_in_flight_max,
        )
        self.access = DiscordAccess(
            allowed_guilds=self._discord.guild_ids, direct_messages=settings.direct_messages, is_member=self._is_member
        )
        self.watch = GatewayWatch(self._clock)
        self.guilds = DiscordGuilds(gate=self.gate, runner=self.runner, budgets=self.budgets, clock=self._clock,
                                    forget=ports.forget_team, purge=settings.uninstall_data == "purge")
        # Learning from channels (core.learning.ports.LearnsChannels): the history door, the facts, the live events.
        self._learning = learning_parts(settings=settings, client=lambda: self.client, budgets=self.budgets,
                                        clock=self._clock, gate=self.gate, ports=ports)
        self.channel_history, self.channel_facts = self._learning.history, self._learning.facts
        self.client = self._build_client(engine, ports)
        self.notifier = DiscordNotifier(client=lambda: self.client, budgets=self.budgets, clock=self._clock)
        # What the read_conversation tool reads through (thread context uses the same reading function).
        self.reader = DiscordReader(
            client=lambda: self.client, message_content=self._discord.message_content_intent,
            budget=self.budgets.global_budget,
        )
        self._connection: asyncio.Task[None] | None = None

    def _build_client(self, engine: Engine, ports: AdapterPorts, shards: Shards = ()) -> RelayClient:
        """The discord.py client with a handler for each kind of event: messages, /ask, approval, Stop and 👍/👎
        clicks, /relaybot config; an AutoShardedClient over `shards` when DISCORD_SHARD_COUNT is set."""
        limits = render.stream_limits(
            min_edit_interval_s=self._tuning.min_edit_interval_s, backoff_base_s=self._tuning.backoff_base_s,
            placeholder_after_s=self._settings.stream_placeholder_after_s,
        )
        surfaces = DiscordSurfaces(budgets=self.budgets, limits=limits, clock=self._clock, feedback=self._settings.feedback_buttons)
        runner, gate, access = self.runner, self.gate, self.access
        count = self._plan.count
        sharding: dict[str, Any] = {} if count is None else {"shard_count": count, "shard_ids": list(shards)}
        client = (ShardedRelayClient if sharding else RelayClient)(
            **sharding,
            inbound=DiscordInbound(
                engine=engine, runner=runner, surfaces=surfaces, gate=gate, access=access, conversations=ports.conversations,
                follow_unmentioned=self._discord.message_content_intent,
            ),
            commands=DiscordCommands(engine=engine, runner=runner, surfaces=surfaces, gate=gate, access=access),
            clicks=DiscordClicks(approvals=engine.approvals, runner=runner, surfaces=surfaces, gate=gate, access=access),
            message_content=self._discord.message_content_intent,
            guild_ready_timeout_s=self._tuning.guild_ready_timeout_s,
            watch=self.watch,
            state=ports.state,
        )
        # Stop clicks (adapters/discord/controls.py), looked up on the client by the StopButton.
        client.stops = DiscordStops(runs=engine.runs, gate=self.gate, actor_of=actor_of)
        # 👍/👎 clicks and 👎 reasons (adapters/discord/feedback.py), looked up on the client by the buttons.
        client.feedback = DiscordFeedback(feedback=ports.feedback, gate=self.gate)
        # /relaybot config show | set | clear | history: a channel's settings, for Manage Server or CHANNEL_ADMIN_ROLES.
        client.tree.add_command(command_group(DiscordAdmin(admin=engine.channel_admin, gate=self.gate,
                                                           learning=learning_port(ports))))
        self.guilds.listen(client)  # joins welcomed or left, removals' pending work dropped (adapters/discord/guilds.py)
        client.learning = self._learning.events  # every message, edit, delete and rename, for learning
        self._learning.events.listen(client)
        return client

    async def _is_member(self, guild_id: int, user_id: int) -> bool:
        """Asked of Discord's REST API: the bot has no members intent, so its cache does not know."""
        return await calls.is_member(self.client, guild_id, user_id)

    @property
    def inflight_answers(self) -> int:
        return self.runner.inflight

    @property
    def queued_answers(self) -> int:
        return self.runner.queued

    async def start(self) -> None:
        """Logs in, repairs answers a crash left streaming, then connects the gateway."""
        apply_endpoints(self._settings)
        assert self._discord.token
        await calls.login(self.client, self._discord.token)
        watch_global_lock(self.client.http)
        # Before the gateway: no new answer can be streaming yet, so every record left is a dead one.
        await self.maintain()
        if self._plan.count is not None:
            assert self.client.user is not None  # fixed once it connects; a takeover starts a new client
            self.client.shard_ids = list(await self._shards.at_start(str(self.client.user.id)))
        if self._shards.standing_by:
            self.watch.up()
            log.info("Discord: no shard is free; standing by as %s", self.client.user)
            return
        await self._connect_until_ready()
        log.info("Discord connected as %s", self.client.user)

    async def _connect_until_ready(self) -> None:
        self._connect()
        assert self._connection is not None
        ready = asyncio.create_task(self.client.wait_until_ready())
        done, _ = await asyncio.wait(
            {ready, self._connection}, timeout=self._tuning.ready_timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if ready not in done:
            ready.cancel()
            if self._connection in done:
                self._connection.result()  # raises the connection's error
            raise TimeoutError(f"Discord did not become ready within {self._tuning.ready_timeout_s:g} s")
        self.watch.up()  # READY is in: on_ready may not have run yet
        self.budgets.weigh(len(self.client.guilds))

    def use_shard_leases(self, leases: ShardLeasePort) -> None:
        """With DISCORD_SHARD_COUNT, shards are claimed by lease among the bot's live processes (before start)."""
        self._shards.leases = leases

    async def _follow_shards(self) -> None:
        """On every beat: shards taken over (their process died) or given up start a new client; the old one hears
        nothing once the new is ready (both hear the shards they share meanwhile: the gate takes each event once)."""
        shards = await self._shards.on_beat() if self.gate.accepting else None
        if shards is None:
            return
        old, old_connection = self.client, self._connection
        client = self._build_client(self._engine, self._ports, shards)
        await calls.login(client, self._discord.token or "")
        watch_global_lock(client.http)
        self.client, self._connection = client, None
        if shards:
            try:
                await self._connect_until_ready()
            except (TimeoutError, discord.DiscordException, OSError):
                log.exception("the client over Discord shards %s is not ready yet; it goes on connecting", shards)
        self._retired.add(old, old_connection)

    def _connect(self) -> None:
        # Every event handler discord.py starts comes from this task, and inherits the platform.
        self._connection = asyncio.create_task(
            self.client.connect(reconnect=True), name="discord-gateway", context=observe.platform_context(PLATFORM)
        )

    def _gateway_ended(self) -> str | None:
        """Why the gateway task ended while the adapter still runs, or None while it runs."""
        if self._connection is None or not self._connection.done() or self.client.is_closed():
            return None
        if self._connection.cancelled():
            return "the gateway task was cancelled"
        error = self._connection.exception()
        return f"the gateway task ended: {error!r}" if error else "the gateway task ended"

    async def maintain(self) -> None:
        """At start and every few seconds: reconnect a gateway that gave up, repair what dead processes left
        streaming, deliver finals nobody is delivering."""
        with observe.platform_scope(PLATFORM):
            await self._follow_shards()
            self.budgets.weigh(len(self.client.guilds))  # guilds joined or left since: the bot-wide budget's split
            ended = self._gateway_ended()
            if ended is not None and self.gate.accepting:
                log.error("%s; connecting again", ended)
                self.watch.down()
                await close_left_sockets(self.client)
                self._connect()
            await self.runner.repair_leftovers(DiscordShownMessages(self.client, self.budgets, self._clock))
            delivery = DiscordFinalDelivery(self.client, self.budgets, self._clock)
            # Discord's nonce covers a re-post for minutes only: an attempt whose reply was lost is looked up.
            await self.runner.deliver_pending(delivery, finder=delivery)

    async def readiness(self) -> str | None:
        """READY seen, and not reconnecting for more than RECONNECT_GRACE_S (or standing by without a shard)."""
        if self._shards.standing_by and not self.client.is_closed():
            return None
        if self.client.is_closed() and self._connection is None:
            return "the gateway is not connected"
        return self._gateway_ended() or self.watch.reason()

    async def stop_accepting(self) -> None:
        """Messages, /ask and clicks are turned away from now on (the first step of a shutdown)."""
        self.gate.accepting = False

    async def interrupt_inflight(self) -> None:
        """Answers still streaming end now, with what they showed plus the interrupted note."""
        await self.runner.interrupt_all()

    async def close(self) -> None:
        """Cancels what is still running, then disconnects the gateway."""
        await self.gate.cancel_handlers(CLOSE_TIMEOUT_S)
        await self._learning.events.feed.close()
        # Answers still streaming keep their live records: the next start repairs them, as after a crash.
        answers = self.runner.cancel_all()
        if answers:
            await asyncio.wait(answers, timeout=CLOSE_TIMEOUT_S)
        await self._retired.close()
        await self.client.close()
        if self._connection is not None:
            try:
                await asyncio.wait_for(self._connection, CLOSE_TIMEOUT_S)
            except (asyncio.TimeoutError, asyncio.CancelledError, discord.DiscordException, OSError):
                log.info("Discord gateway task ended during close", exc_info=True)
            self._connection = None

