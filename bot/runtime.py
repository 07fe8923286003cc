"""Wiring: settings → database → model client → tools → engine → scheduler → HTTP → adapters, and back down."""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
from datetime import timezone
from collections.abc import Callable, Sequence
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from psycopg_pool import AsyncConnectionPool

from adapters.base import AdapterPorts, PlatformAdapter
from adapters.http.server import HttpServer
from adapters.platform import Lifecycle, Platform
# build_llm, build_registry and add_sql_query are imported from here too (doctor, tools_cli, tests).
from bot.engine_parts import add_sql_query, build_engine, build_llm, build_registry
from bot.jobs import expire_approvals, sync_sources
from bot.learning_runtime import ProcessLearning
from bot.platforms import PLATFORMS, ApiLifecycle
from core import metrics
from core.collector import QuietCollector
from core.config import Settings, SettingsError
from core.engine import Engine
from core.learning.visibility import ChannelVisibility
from core.llm import LLMClient
from core.loop_watch import LoopWatch
from core.retrieval import main_content
from core.notifier import Notifier
from core.reminders import SWEEP_INTERVAL_S, ReminderBook, ReminderService
from core.api_access import API_PLATFORM
from core.store.api_conversations import ApiConversations
from core.store.api_keys import ApiKeyStore
from core.store.app_state import AppStateStore
from core.store.event_journal import EventJournal
from core.store.feedback import FeedbackStore
from core.store.conversations import ConversationStore
from core.store.db import Database
from core.store.heartbeats import Heartbeats, process_identity
from core.store.installations import InstallStore
from core.store.live_messages import LiveMessages
from core.store.pending_finals import PendingFinals
from core.store.processed_events import ProcessedEvents
from core.store.run_stops import RunStopStore
from core.store.shard_leases import ShardLeases
from core.store.team_data import forget_team
from core.tokens import get_token_counter
from core.tools import ToolServices
from core.tools.read_conversation import PlatformReaders
from core.tools.mcp.tools import McpTools

log = logging.getLogger(__name__)

PRUNE_EVENTS_INTERVAL_S = 3600
EXPIRE_APPROVALS_INTERVAL_S = 60
REVERT_STUCK_INTERVAL_S = 300
STUCK_RESUMING_AFTER_S = 900
PRUNE_JOURNAL_INTERVAL_S = 300
# How long a stream's events can be read back with Last-Event-ID.
API_JOURNAL_KEEP_S = 15 * 60
# How long startup waits for each MCP server's first connection attempt (they go on connecting after).
MCP_STARTUP_WAIT_S = 10.0
DRAIN_POLL_S = 0.05
# /readyz's database check: a connection from the pool and `SELECT 1` within this (a probe waits less).
READY_DB_TIMEOUT_S = 2.0


def build_api(settings: Settings, engine: Engine, db: Database) -> Any:
    """The HTTP API adapter over this engine and database (its routes are added to a server by the caller)."""
    from adapters.http.api.adapter import ApiAdapter

    return ApiAdapter(
        engine=engine, keys=ApiKeyStore(db), conversations=ApiConversations(db), journal=EventJournal(db),
        max_body_bytes=settings.api_max_body_bytes,
    )


class Runtime:
    """Owns every long-lived part of a bot process and starts/stops them in order."""

    def __init__(self, settings: Settings, *, platforms: Sequence[Platform] = PLATFORMS) -> None:
        self.settings = settings
        self.platforms = tuple(platforms)
        self.db = Database(url=settings.database_url, data_dir=settings.data_dir)
        self.scheduler = AsyncIOScheduler(timezone=timezone.utc)
        self.http = HttpServer(host=settings.http_host, port=settings.http_port, metrics_token=settings.metrics_token)
        self.adapters: list[PlatformAdapter] = []
        # What starts after the HTTP server and stops first: the platform adapters, then the API when enabled.
        self.services: list[Lifecycle] = []
        self.engine: Engine | None = None
        # Who this process is, for the records of what it streams and for its heartbeat.
        self.owner = process_identity()
        self.heartbeats = Heartbeats(self.db, owner=self.owner, interval_s=settings.heartbeat_interval_s)
        self.reminders: ReminderService | None = None
        self.api: Any = None  # adapters.http.api.adapter.ApiAdapter when API_ENABLED
        # Lent to tools with the engine; each adapter's reader is registered once the adapters are built.
        self.readers = PlatformReaders()
        self._llm: LLMClient | None = None
        self._warm_up: asyncio.Task[None] | None = None
        self._db_open = False
        self._stopping = False
        self.syncer: Any = None  # core.retrieval.sync.SourceSyncer, sharing the retriever's embedder
        self.mcp: McpTools | None = None  # when MCP_SERVERS is set
        self.learning: ProcessLearning | None = None  # learning from channels (bot/learning_runtime.py), with the engine

    async def open_engine(self) -> Engine:
        """Database, model client, retriever and engine (enough for `chat`)."""
        await self.db.open()
        log.info("database: %s", self.db.description)
        metrics.watch_pool(lambda: _in_use(self.db.pool) if self._db_open else 0.0)
        self._db_open = True
        self._llm = build_llm(self.settings)
        from bot.retrieval import build_retriever

        # The rule is lent the adapters' facts once they are built; the retriever checks every learned channel with it.
        visibility = ChannelVisibility()
        retriever = await build_retriever(self.settings, self.db, visibility=visibility)
        self.learning = ProcessLearning(self.settings, self.db, embedder=retriever.embedder, visibility=visibility)
        from bot.retrieval import fetch_policy
        from core.retrieval.sync import SourceSyncer

        self.syncer = SourceSyncer(self.db, embedder=retriever.embedder, policy=fetch_policy(self.settings))
        # Loaded in the background, and only when stored vectors need it: no question waits for it otherwise.
        self._warm_up = asyncio.create_task(_warm_up(retriever), name="embedding-warm-up")
        registry = await add_sql_query(build_registry(self.settings), self.settings)
        if self.settings.mcp_servers:
            # Connected now; a server that is down leaves its tools out (and says so) until it reconnects.
            self.mcp = McpTools.from_settings(self.settings)
            await self.mcp.start(wait_s=MCP_STARTUP_WAIT_S)
            registry.add_provider(self.mcp)
        # The engine's stores and services are built here (bot/engine_parts.py), not by the engine.
        self.engine = build_engine(
            settings=self.settings,
            db=self.db,
            llm=self._llm,
            registry=registry,
            approval_layers=self.mcp.approval_layers() if self.mcp is not None else (),
            retriever=retriever,
            # The tool only writes the row; the ReminderService of a process serving the platform delivers it.
            tool_services=ToolServices(reminders=ReminderBook(self.db), conversations=self.readers),
        )
        return self.engine

    async def start(self) -> None:
        engine = await self.open_engine()
        await self.heartbeats.beat()
        self.adapters = self._build_adapters(engine)
        self._learning().attach(self.adapters)
        for adapter in self.adapters:
            self.readers.register(adapter.platform, adapter.reader)
            # Its budgets take this process's share among the live processes (core/store/shares.py).
            follow = getattr(getattr(adapter, "budgets", None), "follow", None)
            if follow is not None:
                follow(self.heartbeats.shares)
        notifiers: dict[str, Notifier] = {adapter.platform: adapter.notifier for adapter in self.adapters}
        # Its claims name this process's heartbeat owner, so another process takes them over only if it dies.
        self.reminders = ReminderService(
            self.db, self.scheduler, notifiers, instance=self.owner, retry_grace_s=self.settings.reminder_retry_grace_s
        )
        self._schedule_jobs(engine, self.reminders, notifiers)
        self.scheduler.start()
        await self.reminders.rearm_all()
        # Ready: the database answers and every configured platform is connected.
        self.http.add_readiness_check("database", self.database_readiness)
        self.services = list(self.adapters)
        if self.settings.api_enabled:
            self.api = build_api(self.settings, engine, self.db)
            self.services.append(ApiLifecycle(self.api, self.http.app))
        for adapter in self.adapters:
            self.http.add_readiness_check(adapter.platform, adapter.readiness)
        await self.http.start()
        for service in self.services:
            await service.start()
        if not self.adapters:
            needed = ", ".join(platform.settings.variables()[0] for platform in self.platforms)
            log.warning("no platform is configured (%s): only the HTTP health check is served", needed)

    def _learning(self) -> ProcessLearning:
        assert self.learning is not None, "open_engine builds it"
        return self.learning

    async def _sync_sources(self) -> None:
        await sync_sources(self.syncer)

    async def _prune_journal(self) -> None:
        await EventJournal(self.db).prune(older_than_s=API_JOURNAL_KEEP_S)

    async def database_readiness(self) -> str | None:
        """None when a pooled connection answers `SELECT 1` in time; otherwise why not."""
        try:
            async with self.db.pool.connection(timeout=READY_DB_TIMEOUT_S) as conn:
                await conn.execute("SELECT 1")
        except Exception as error:
            return f"the database does not answer ({type(error).__name__})"
        return None

    def _build_adapters(self, engine: Engine) -> list[PlatformAdapter]:
        """Each platform of the table whose credentials are set; built before the HTTP server starts (one may add a route)."""
        adapters: list[PlatformAdapter] = []
        ports = AdapterPorts(
            live=LiveMessages(self.db, owner=self.owner), dedup=ProcessedEvents(self.db),
            conversations=ConversationStore(self.db), outbox=PendingFinals(self.db, owner=self.owner),
            state=AppStateStore(self.db), feedback=FeedbackStore(self.db), installs=InstallStore(self.db),
            forget_team=functools.partial(forget_team, self.db), learning=self._learning().service,
        )
        try:
            for platform in self.platforms:
                if platform.configured(self.settings):
                    adapters.append(platform.adapter(settings=self.settings, engine=engine, ports=ports, http=self.http))
        except ValueError as error:
            raise SettingsError(f"{error}.") from None
        for adapter in adapters:
            # A platform whose events are split among the live processes (shards) claims its part by lease.
            use_shard_leases = getattr(adapter, "use_shard_leases", None)
            if use_shard_leases is not None:
                use_shard_leases(ShardLeases(self.db, owner=self.owner))
        return adapters

    def _schedule_jobs(self, engine: Engine, reminders: ReminderService, notifiers: dict[str, Notifier]) -> None:
        events = ProcessedEvents(self.db)
        # The API's pauses expire too, when this process serves the API (there is no message to edit).
        api_platforms = (API_PLATFORM,) if self.settings.api_enabled else ()

        async def expire() -> None:
            await expire_approvals(engine.approvals, notifiers, without_messages=api_platforms)

        async def revert_stuck() -> None:
            await engine.approvals.revert_stuck(older_than_s=STUCK_RESUMING_AFTER_S)

        # Coroutine functions only: apscheduler awaits those; a lambda returning a coroutine would
        # be called and its coroutine never awaited.
        jobs = [
            (self.heartbeats.beat, self.heartbeats.interval_s, "heartbeat"),
            (events.prune, PRUNE_EVENTS_INTERVAL_S, "prune-processed-events"),
            (expire, EXPIRE_APPROVALS_INTERVAL_S, "expire-approvals"),
            (revert_stuck, REVERT_STUCK_INTERVAL_S, "revert-stuck-runs"),
            (reminders.sweep, SWEEP_INTERVAL_S, "sweep-reminders"),
            (self._prune_journal, PRUNE_JOURNAL_INTERVAL_S, "prune-api-journal"),
            (RunStopStore(self.db).prune, PRUNE_EVENTS_INTERVAL_S, "prune-run-stops"),
        ]
        if self.settings.source_sync_enabled:
            jobs.append((self._sync_sources, self.settings.source_sync_check_s, "sync-sources"))
        jobs += self._learning().jobs() + [
            (adapter.maintain, self.heartbeats.interval_s, f"maintain-{adapter.platform}") for adapter in self.adapters
        ]
        for job, interval_s, name in jobs:
            self.scheduler.add_job(self._job(job, name), "interval", seconds=interval_s, id=name, coalesce=True,
                                   max_instances=1)

    def _job(self, job: Any, name: str) -> Any:
        """A scheduled job whose wait is cancelled by the shutdown (a delivery paced behind a budget) ends with
        a log line, not apscheduler's traceback; any other failure is apscheduler's to log, as before."""

        async def run() -> None:
            try:
                await job()
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
                log.info("job %s stopped: the process is shutting down", name)

        run.__name__ = run.__qualname__ = name
        return run

    async def _drain(self, grace_s: float) -> bool:
        """True when every run ended and no question waits for its turn (ANSWERS_IN_FLIGHT_MAX) within grace_s."""
        assert self.engine is not None
        deadline = asyncio.get_running_loop().time() + grace_s
        while True:
            if not await self.engine.drain(max(0.0, deadline - asyncio.get_running_loop().time())):
                return False
            if not any(adapter.queued_answers for adapter in self.adapters):
                return True
            # Idle between two answers: a waiting question is about to take the slot just freed.
            await asyncio.sleep(DRAIN_POLL_S)

    async def stop(self) -> None:
        """Stop taking work, give running answers a grace period, mark the rest interrupted, close down."""
        self._stopping = True
        self.http.mark_stopping()
        for service in self.services:
            await _quietly(service.stop_accepting(), "stop accepting")
        if self.engine is not None and not await self._drain(self.settings.shutdown_grace_s):
            log.warning("%d answers still running after the grace period; marking them interrupted", self.engine.active_runs)
            for adapter in self.adapters:
                await _quietly(adapter.interrupt_inflight(), "interrupt answers")
        if self.learning is not None:
            await _quietly(self.learning.stop(), "stop learning from channels")
        for service in self.services:
            await _quietly(service.close(), "close")
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        if self.adapters:
            # Gone cleanly: what this process left streaming is another's (or the next start's) to repair now.
            await _quietly(self.heartbeats.stop(), "remove the heartbeat")
        await self.http.stop()
        if self._warm_up is not None and not self._warm_up.done():
            self._warm_up.cancel()
        if self.mcp is not None:
            await _quietly(self.mcp.close(), "close the MCP connections")
        if self._llm is not None:
            await self._llm.aclose()
        if self.learning is not None:
            await _quietly(self.learning.close(), "close the channel learning")
        self._db_open = False
        await self.db.close()


async def warm_up_process(model: str | None = None) -> None:
    """Before any event: the page reader's imports and tables, and the token counters (`model`'s and the default's:
    tiktoken builds an encoding in ~250 ms), in a worker thread (which still holds the interpreter for most of an
    import, but leaves the loop its turns)."""
    try:
        await asyncio.to_thread(main_content.warm_up)
    except Exception:
        log.exception("could not load the page reader at start; the first page read will try again")
    # Cached once built: the registry's tools and the engine then find them ready instead of building them on the loop.
    await asyncio.to_thread(get_token_counter, model)
    await asyncio.to_thread(get_token_counter)


def settle_after_start(busy: Callable[[], bool]) -> QuietCollector:
    """Everything imported and built at start lives as long as the process: moved out of the collector's reach, a full
    collection no longer walks ~160k objects on the event loop (a 100 ms stall each); and full collections wait for
    a moment when `busy()` is false (core/collector.py). Stop the collector returned at shutdown."""
    gc.freeze()
    collector = QuietCollector(busy)
    collector.start()
    return collector


async def _warm_up(retriever: Any) -> None:
    try:
        await retriever.warm_up()
    except Exception:
        log.exception("could not load the embedding model in the background; the first search will try again")


def _in_use(pool: AsyncConnectionPool) -> float:
    """Connections checked out of the pool now (its size less the idle ones)."""
    stats = pool.get_stats()
    return float(stats.get("pool_size", 0) - stats.get("pool_available", 0))


async def _quietly(step: Any, what: str) -> None:
    try:
        await step
    except Exception:
        log.exception("shutdown step failed: %s", what)


async def serve(settings: Settings) -> int:
    """`relaybot run`: start everything, wait for SIGTERM/SIGINT, stop cleanly."""
    import signal

    runtime = Runtime(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # First, so every task of the process is known to it and a stall in startup is seen too.
    watch = LoopWatch()
    watch.start()
    collector: QuietCollector | None = None
    try:
        await warm_up_process(settings.llm_model)
        await runtime.start()
        collector = settle_after_start(lambda: runtime.engine is not None and runtime.engine.active_runs > 0)
        log.info("relaybot is running")
        await stop.wait()
        log.info("shutting down")
    finally:
        try:
            await runtime.stop()
        finally:
            if collector is not None:
                await collector.stop()
            await watch.stop()
    return 0
