"""Discord's gateway sessions: which shards this process runs (all guilds on one session, DISCORD_SHARD_IDS, or
shards claimed by lease), a client replaced when they change, and whether the gateway can be counted on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import discord

from adapters.streaming import Clock, MonotonicClock
from core import metrics
from core.config import SettingsError

from . import transport_calls as calls
from .settings import DiscordSettings
from .surface import PLATFORM

log = logging.getLogger(__name__)

# A gateway reconnecting for longer than this makes the process not ready (a short resume is normal).
RECONNECT_GRACE_S = 30.0
# How often a client replaced by another over new shards looks whether its answers are done (then it closes).
RETIRE_POLL_S = 0.5

Shards = tuple[int, ...]
# Discord lets a bot's shards identify max_concurrency at a time, one per bucket (shard id modulo max_concurrency),
# each bucket once in this window (GET /gateway/bot's session_start_limit); discord.py waits it out before every
# identify but a client's first, whatever the bot's max_concurrency.
IDENTIFY_WINDOW_S = 5.0


class IdentifyPacing:
    """When each of a client's shards may identify: its bucket (shard id % max_concurrency) once a window, so a bot
    allowed 16 at a time starts 16 shards at once instead of one every 5 s."""

    def __init__(self, max_concurrency: int, clock: Clock) -> None:
        self.max_concurrency = max(1, max_concurrency)
        self._clock = clock
        self._next_s: dict[int, float] = {}

    async def wait(self, shard_id: int) -> None:
        bucket = shard_id % self.max_concurrency
        at = max(self._clock.now(), self._next_s.get(bucket, 0.0))
        self._next_s[bucket] = at + IDENTIFY_WINDOW_S  # booked before the wait: one reconnecting meanwhile goes next
        await self._clock.sleep(at - self._clock.now())


class PacedIdentify:
    """For an AutoShardedClient: its shards identify as the bot's max_concurrency lets them (IdentifyPacing), where
    discord.py's own hook waits 5 s before each but the first."""

    http: discord.http.HTTPClient  # the client's own
    identify_pacing: IdentifyPacing | None = None

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        if self.identify_pacing is None:
            self.identify_pacing = IdentifyPacing(await calls.max_concurrency(self.http), MonotonicClock())
        await self.identify_pacing.wait(shard_id or 0)


async def close_left_sockets(client: discord.Client) -> None:
    """The gateway sockets an ended gateway task left open, closed before the client connects again: their
    keep-alive threads (and a sharded client's shard readers) stop with them instead of beating beside the new."""
    if isinstance(client, discord.AutoShardedClient):
        for shard in client.shards.values():
            await shard.disconnect()
    elif client.ws is not None:
        await client.ws.close(code=1000)


class ShardLeasePort(Protocol):
    """Shard leases shared by every process of a bot (core.store.shard_leases.ShardLeases), tied to heartbeats."""

    async def claim(self, *, bot: str, shard_count: int, fixed: Sequence[int] | None = None) -> tuple[Shards, str | None]:
        """The shards held now and None, or () and why this process is refused (another shard count runs)."""
        ...


@dataclass(frozen=True, kw_only=True)
class ShardPlan:
    """DISCORD_SHARD_COUNT (None: no shards, one session gets every guild) and DISCORD_SHARD_IDS (None: by lease)."""

    count: int | None = None
    fixed: Shards | None = None

    @property
    def sharded(self) -> bool:
        return self.count is not None


def parse_shard_ids(parts: Sequence[str], count: int) -> Shards:
    """DISCORD_SHARD_IDS' parts ("3", "0-2") as sorted shard ids, each below the count; ValueError says what is wrong."""
    ids: set[int] = set()
    for part in parts:
        first, _, last = part.partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            raise ValueError(f"DISCORD_SHARD_IDS: {part!r} is not a shard id or a range like 0-3") from None
        if not 0 <= low <= high < count:
            raise ValueError(f"DISCORD_SHARD_IDS: {part!r} is outside 0 to {count - 1} (DISCORD_SHARD_COUNT is {count})")
        ids.update(range(low, high + 1))
    return tuple(sorted(ids))


def shard_plan(group: DiscordSettings) -> ShardPlan:
    """The plan the settings ask for; ValueError when DISCORD_SHARD_IDS cannot be used."""
    if group.shard_count is None:
        if group.shard_ids:
            raise ValueError("DISCORD_SHARD_IDS needs DISCORD_SHARD_COUNT (the total number of shards of the bot)")
        return ShardPlan()
    fixed = parse_shard_ids(group.shard_ids, group.shard_count) if group.shard_ids else None
    return ShardPlan(count=group.shard_count, fixed=fixed)


class ShardKeeper:
    """The shards this process runs: decided at start, and looked at again on every beat (a lease's owner died)."""

    def __init__(self, plan: ShardPlan) -> None:
        self.plan = plan
        self.leases: ShardLeasePort | None = None  # none: nothing to share with (a test's single adapter)
        self.shards: Shards = ()
        self.bot: str | None = None  # the bot's user id once started: whose shards are claimed
        self._refused: str | None = None

    @property
    def standing_by(self) -> bool:
        """Started, and no shard was free: the process's jobs run, and it takes shards over when their process dies."""
        return self.bot is not None and not self.shards

    async def at_start(self, bot: str) -> Shards:
        """The shards to launch with; raises SettingsError when the live processes run another shard count."""
        count = self.plan.count
        assert count is not None, "only a sharded plan has shards"
        self.bot = bot
        if self.leases is None:
            # Nothing to share leases with (a test's single adapter): the named shards, or every one.
            self.shards = self.plan.fixed if self.plan.fixed is not None else tuple(range(count))
            return self.shards
        shards, refused = await self.leases.claim(bot=bot, shard_count=count, fixed=self.plan.fixed)
        if refused is not None:
            raise SettingsError(f"{refused}.")
        self.shards = shards
        log.info("Discord shards %s of %d run here%s", _named(shards), count,
                 "" if self.plan.fixed is not None else " (claimed by lease)")
        return shards

    async def on_beat(self) -> Shards | None:
        """The shards to run from now on when they changed (a dead process's taken over, one taken by a process
        with DISCORD_SHARD_IDS), else None. A database that does not answer changes nothing: the shards held
        go on running."""
        count, bot = self.plan.count, self.bot
        if self.leases is None or count is None or bot is None:
            return None
        try:
            shards, refused = await self.leases.claim(bot=bot, shard_count=count, fixed=self.plan.fixed)
        except Exception as error:
            log.warning("could not renew the Discord shard claims (%r); running shards %s as before", error,
                        _named(self.shards))
            return None
        if refused is not None:
            if refused != self._refused:
                log.error("%s; running shards %s as before", refused, _named(self.shards))
            self._refused = refused
            return None
        self._refused = None
        if shards == self.shards:
            return None
        log.info("Discord shards of this process: %s, now %s of %d", _named(self.shards), _named(shards), count)
        self.shards = shards
        return shards


def _named(shards: Shards) -> str:
    return ", ".join(map(str, shards)) if shards else "none"


class RetiredClients:
    """Clients replaced by one over new shards: they hear no more events, and answers under way still post and edit
    through their HTTP sessions, closed once none is left (at the latest after `grace_s`)."""

    def __init__(self, *, answering: Callable[[], int], grace_s: float, close_timeout_s: float, clock: Clock) -> None:
        self._answering = answering
        self._grace_s = grace_s
        self._close_timeout_s = close_timeout_s
        self._clock = clock
        self._closing: set[asyncio.Task[None]] = set()

    def add(self, old: discord.Client, connection: asyncio.Task[None] | None) -> None:
        log.info("Discord: the client over the old shards hears no more events; it closes once its answers are done")
        setattr(old, "watch", GatewayWatch(self._clock))  # its disconnect is no news for the adapter's readiness
        old._connection.parsers.clear()  # discord.py drops an event it has no parser for

        async def close_when_done() -> None:
            try:
                waited_s = 0.0
                while self._answering() and waited_s < self._grace_s:
                    await asyncio.sleep(RETIRE_POLL_S)
                    waited_s += RETIRE_POLL_S
            finally:
                await old.close()
                if connection is not None:
                    await asyncio.wait({connection}, timeout=self._close_timeout_s)

        task = asyncio.create_task(close_when_done(), name="discord-retired-client")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """At the adapter's close: those still waiting for their answers close now."""
        for task in list(self._closing):
            task.cancel()
        if self._closing:
            await asyncio.wait(self._closing, timeout=self._close_timeout_s)


class GatewayWatch:
    """Whether the gateway can be counted on: READY seen, and not reconnecting for more than RECONNECT_GRACE_S."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._ready_seen = False
        self._down_since: float | None = None

    def up(self) -> None:
        """READY or RESUMED."""
        self._ready_seen = True
        self._down_since = None

    def down(self) -> None:
        """The gateway connection closed; discord.py reconnects (or the adapter is closing)."""
        if self._down_since is None:
            self._down_since = self._clock.now()

    def reason(self) -> str | None:
        if not self._ready_seen:
            return "the gateway has not sent READY yet"
        if self._down_since is not None:
            down_s = self._clock.now() - self._down_since
            if down_s > RECONNECT_GRACE_S:
                return f"the gateway has been reconnecting for {down_s:.0f} s"
        return None


def tolerate_malformed_events(parsers: dict[str, Callable[[Any], None]]) -> None:
    """Makes discord.py drop a gateway event it cannot parse (logged) instead of ending the gateway task.

    A parser's KeyError or TypeError (an event missing a field) would otherwise leave the connect loop for
    good: the bot would stay up but hear nothing more."""

    def tolerant(event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
        def parse_or_drop(data: Any) -> None:
            try:
                parse(data)
            except Exception:
                log.exception("dropped a malformed %s gateway event", event)
                metrics.record_malformed_event(platform=PLATFORM)

        return parse_or_drop

    for event, parse in list(parsers.items()):
        parsers[event] = tolerant(event, parse)
