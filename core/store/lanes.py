"""A lane to the database: one connection of its own, apart from the pool every other query shares, for writes that
must not queue behind answers' queries (an event's record before its ack; a post's live record before it is sent)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg

T = TypeVar("T")
# Seconds to open a lane's connection (libpq counts whole seconds, at least 2).
LANE_CONNECT_TIMEOUT_S = 2


class Lane:
    """`run(work)` runs `work(conn)` in one transaction on the lane's connection, one caller at a time (its callers
    batch: core.store.group_commit). Opened on first use and again after it broke; a connection that died while
    idle (a restarted server) is replaced and the work run once more — so `work` must be safe to repeat (upserts,
    deletes, inserts that do nothing on conflict)."""

    def __init__(self, url: Callable[[], str | None]) -> None:
        self._url = url
        self._conn: psycopg.AsyncConnection | None = None
        self._lock = asyncio.Lock()

    async def run(self, work: Callable[[psycopg.AsyncConnection], Awaitable[T]]) -> T:
        async with self._lock:
            reused = self._conn is not None
            try:
                return await self._run(work)
            except psycopg.OperationalError:
                await self.close()
                if not reused:
                    raise
            except BaseException:
                await self.close()  # cut off mid-statement (a timeout): its state is unknown
                raise
            try:
                return await self._run(work)
            except BaseException:
                await self.close()
                raise

    async def _run(self, work: Callable[[psycopg.AsyncConnection], Awaitable[T]]) -> T:
        if self._conn is None:
            url = self._url()
            if url is None:
                raise psycopg.OperationalError("the database is not open yet")
            self._conn = await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=LANE_CONNECT_TIMEOUT_S)
        async with self._conn.transaction():
            return await work(self._conn)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
