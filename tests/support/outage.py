"""A database outage on the session's real Postgres: one test database refuses connections and loses the open ones."""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg


class DatabaseOutage:
    """`down()`: new connections refused, open ones terminated (as a stopped server would); `up()`: back.
    `blip()`: open connections terminated, new ones accepted (a restarted server, seen from a pool)."""

    def __init__(self, *, admin_url: str, database_url: str) -> None:
        self._admin_url = admin_url
        self._name = urlsplit(database_url).path.lstrip("/")

    async def _run(self, *statements: str) -> None:
        async with await psycopg.AsyncConnection.connect(self._admin_url, autocommit=True) as conn:
            for statement in statements:
                await conn.execute(statement)

    def _terminate(self) -> str:
        return (
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            f" WHERE datname = '{self._name}' AND pid <> pg_backend_pid()"
        )

    async def down(self) -> None:
        await self._run(f'ALTER DATABASE "{self._name}" ALLOW_CONNECTIONS false', self._terminate())

    async def up(self) -> None:
        await self._run(f'ALTER DATABASE "{self._name}" ALLOW_CONNECTIONS true')

    async def blip(self) -> None:
        await self._run(self._terminate())
