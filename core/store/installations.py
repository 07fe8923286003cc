"""The app's installs (bots per workspace or Grid org, and their installers) and the OAuth flow's states (implements core.ports.Installs)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from core.ports import InstallRecord
from core.store.db import Database

_COLUMNS = "enterprise_id, team_id, is_enterprise_install, fields, sealed, token_expires_at, installed_at"
_BOT_COLUMNS = f"{_COLUMNS}, refresh_error"
_INSTALLER_COLUMNS = f"{_COLUMNS}, user_id"


def _at(epoch_s: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc) if epoch_s is not None else None


def _epoch(at: datetime | None) -> float | None:
    return at.timestamp() if at is not None else None


def _bot(row: tuple[Any, ...]) -> InstallRecord:
    return InstallRecord(
        enterprise_id=row[0], team_id=row[1], is_enterprise_install=row[2], fields=dict(row[3]), sealed=bytes(row[4]),
        token_expires_at=_epoch(row[5]), installed_at=_epoch(row[6]), refresh_error=row[7],
    )


def _installer(row: tuple[Any, ...]) -> InstallRecord:
    return InstallRecord(
        enterprise_id=row[0], team_id=row[1], is_enterprise_install=row[2], fields=dict(row[3]), sealed=bytes(row[4]),
        token_expires_at=_epoch(row[5]), installed_at=_epoch(row[6]), user_id=row[7],
    )


# The team's own bot first; else the org-wide bot of its org ('' sorts first, so a team row wins with DESC).
_FIND_BOT = (
    f"SELECT {_BOT_COLUMNS} FROM slack_bots WHERE enterprise_id = %(e)s"
    " AND (team_id = %(t)s OR (team_id = '' AND is_enterprise_install AND %(e)s <> ''))"
    " ORDER BY team_id DESC LIMIT 1"
)


class InstallStore:
    """One bot row per (enterprise, team) and one installer row per person; a reinstall replaces them."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def save(self, *, bot: InstallRecord | None, installer: InstallRecord | None) -> None:
        async with self._db.connection() as conn:
            if bot is not None:
                await _upsert_bot(conn, bot)
            if installer is not None:
                await conn.execute(
                    "INSERT INTO slack_installers (enterprise_id, team_id, user_id, is_enterprise_install, fields, sealed,"
                    " token_expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT (enterprise_id, team_id, user_id) DO UPDATE SET"
                    " is_enterprise_install = EXCLUDED.is_enterprise_install, fields = EXCLUDED.fields,"
                    " sealed = EXCLUDED.sealed, token_expires_at = EXCLUDED.token_expires_at, installed_at = now(),"
                    " updated_at = now()",
                    (installer.enterprise_id, installer.team_id, installer.user_id, installer.is_enterprise_install,
                     Jsonb(dict(installer.fields)), installer.sealed, _at(installer.token_expires_at)),
                )

    async def bot(self, *, enterprise_id: str, team_id: str) -> InstallRecord | None:
        async with self._db.connection() as conn:
            cursor = await conn.execute(_FIND_BOT, {"e": enterprise_id, "t": team_id})
            row = await cursor.fetchone()
        return _bot(row) if row else None

    async def installer(self, *, enterprise_id: str, team_id: str, user_id: str | None) -> InstallRecord | None:
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                f"SELECT {_INSTALLER_COLUMNS} FROM slack_installers WHERE enterprise_id = %s AND team_id = %s"
                " AND (%s::text IS NULL OR user_id = %s) ORDER BY installed_at DESC LIMIT 1",
                (enterprise_id, team_id, user_id, user_id),
            )
            row = await cursor.fetchone()
        return _installer(row) if row else None

    async def delete_bot(self, *, enterprise_id: str, team_id: str) -> int:
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM slack_bots WHERE enterprise_id = %s AND team_id = %s", (enterprise_id, team_id)
            )
            return cursor.rowcount

    async def delete_installers(self, *, enterprise_id: str, team_id: str, user_id: str | None) -> int:
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM slack_installers WHERE enterprise_id = %s AND team_id = %s"
                " AND (%s::text IS NULL OR user_id = %s)",
                (enterprise_id, team_id, user_id, user_id),
            )
            return cursor.rowcount

    async def bots(self) -> list[InstallRecord]:
        async with self._db.connection() as conn:
            cursor = await conn.execute(f"SELECT {_BOT_COLUMNS} FROM slack_bots ORDER BY enterprise_id, team_id")
            return [_bot(row) for row in await cursor.fetchall()]

    async def installers(self) -> list[InstallRecord]:
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                f"SELECT {_INSTALLER_COLUMNS} FROM slack_installers ORDER BY enterprise_id, team_id, installed_at"
            )
            return [_installer(row) for row in await cursor.fetchall()]

    async def reseal(self, reseal: Callable[[bytes], bytes]) -> int:
        """Every row's tokens rewritten by `reseal` (opened with any key, sealed with the first: SECRET_KEY's
        rotation), in one transaction; how many rows."""
        count = 0
        async with self._db.connection() as conn:
            for table, key in (("slack_bots", "enterprise_id, team_id"), ("slack_installers", "enterprise_id, team_id, user_id")):
                cursor = await conn.execute(f"SELECT {key}, sealed FROM {table} FOR UPDATE")
                for row in await cursor.fetchall():
                    where = " AND ".join(f"{column.strip()} = %s" for column in key.split(","))
                    await conn.execute(f"UPDATE {table} SET sealed = %s WHERE {where}", (reseal(bytes(row[-1])), *row[:-1]))
                    count += 1
        return count

    @asynccontextmanager
    async def refreshing(self, *, enterprise_id: str, team_id: str) -> AsyncIterator[_BotRefresh]:
        # A transaction-scoped advisory lock: released by the commit (or the rollback) however the block ends,
        # also when the process dies holding it.
        async with self._db.connection() as conn:
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('slack_bot:' || %s || ':' || %s, 0))",
                (enterprise_id, team_id),
            )
            yield _BotRefresh(conn, enterprise_id=enterprise_id, team_id=team_id)

    async def issue_state(self, state: str, *, expires_in_s: float) -> None:
        async with self._db.connection() as conn:
            await conn.execute("DELETE FROM slack_oauth_states WHERE expires_at < now()")
            await conn.execute(
                "INSERT INTO slack_oauth_states (state, expires_at) VALUES (%s, now() + make_interval(secs => %s))",
                (state, expires_in_s),
            )

    async def consume_state(self, state: str) -> bool:
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM slack_oauth_states WHERE state = %s RETURNING expires_at >= now()", (state,)
            )
            row = await cursor.fetchone()
        return bool(row and row[0])


class _BotRefresh:
    """The bot's row read and written on the connection holding its advisory lock."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], *, enterprise_id: str, team_id: str) -> None:
        self._conn = conn
        self._key = (enterprise_id, team_id)

    async def current(self) -> InstallRecord | None:
        cursor = await self._conn.execute(
            f"SELECT {_BOT_COLUMNS} FROM slack_bots WHERE enterprise_id = %s AND team_id = %s", self._key
        )
        row = await cursor.fetchone()
        return _bot(row) if row else None

    async def replace(self, record: InstallRecord) -> None:
        await self._conn.execute(
            "UPDATE slack_bots SET fields = %s, sealed = %s, token_expires_at = %s, refresh_error = NULL,"
            " updated_at = now() WHERE enterprise_id = %s AND team_id = %s",
            (Jsonb(dict(record.fields)), record.sealed, _at(record.token_expires_at), *self._key),
        )

    async def failed(self, reason: str) -> None:
        await self._conn.execute(
            "UPDATE slack_bots SET refresh_error = %s, updated_at = now() WHERE enterprise_id = %s AND team_id = %s",
            (reason, *self._key),
        )


async def _upsert_bot(conn: psycopg.AsyncConnection[Any], bot: InstallRecord) -> None:
    await conn.execute(
        "INSERT INTO slack_bots (enterprise_id, team_id, is_enterprise_install, fields, sealed, token_expires_at)"
        " VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (enterprise_id, team_id) DO UPDATE SET is_enterprise_install = EXCLUDED.is_enterprise_install,"
        " fields = EXCLUDED.fields, sealed = EXCLUDED.sealed, token_expires_at = EXCLUDED.token_expires_at,"
        " installed_at = now(), updated_at = now(), refresh_error = NULL",
        (bot.enterprise_id, bot.team_id, bot.is_enterprise_install, Jsonb(dict(bot.fields)), bot.sealed,
         _at(bot.token_expires_at)),
    )
