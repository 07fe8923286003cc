"""Requests and tokens per account and UTC day in Postgres, taken and reserved atomically: the one ledger kind API keys'
quotas and people's limits both go through (core.quota.DayLedger)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from psycopg import sql

from core.quota import DayLimits, Held, QuotaLimit, QuotaRefusal
from core.store.db import Database

# How a ledger words its refusal: which limit, how many it allows, when the day starts again.
Refusal = Callable[[QuotaLimit, int, datetime], QuotaRefusal]


def today_utc() -> date:
    return datetime.now(timezone.utc).date()


def next_reset(day: date) -> datetime:
    """When the counters of `day` start again: the next UTC midnight."""
    return datetime.combine(day + timedelta(days=1), time(0), tzinfo=timezone.utc)


class DayCounts:
    """One table of (account, day, requests, tokens) rows; `account_column` names the account, `key` reads an account
    id as that column's type. Each ledger words its own refusals."""

    def __init__(self, db: Database, *, table: str, account_column: str, refusal: Refusal,
                 key: Callable[[str], object] = str) -> None:
        self._db = db
        self._refusal = refusal
        self._key = key
        names = {"t": sql.Identifier(table), "a": sql.Identifier(account_column)}
        self._sql = {name: sql.SQL(text).format(**names) for name, text in _STATEMENTS.items()}

    async def take_request(self, account: str, limits: DayLimits, *, today: date | None = None) -> QuotaRefusal | None:
        """Count one request for today, unless a limit is reached: then nothing is counted and the refusal says which.

        One conditional upsert: concurrent requests in any number of processes never take more than the limit.
        """
        day, key = today or today_utc(), self._key(account)
        requests, tokens = limits.requests_per_day, limits.tokens_per_day
        async with self._db.connection() as conn:
            cursor = await conn.execute(self._sql["take"], (key, day, requests, requests, tokens, tokens))
            taken = await cursor.fetchone()
            if taken is not None and (requests is None or taken[0] <= requests):
                return None
            if taken is not None:
                # A limit of 0: the first row was inserted over it. Undo within this transaction.
                await conn.rollback()
                return self._refused("requests_per_day", requests or 0, day)
            cursor = await conn.execute(self._sql["used"], (key, day))
            row = await cursor.fetchone()
        if row is not None and tokens is not None and row[1] >= tokens:
            return self._refused("tokens_per_day", tokens, day)
        return self._refused("requests_per_day", requests or 0, day)

    async def give_back(self, account: str, *, today: date | None = None) -> None:
        """Uncount a request taken today that was refused after all (it lost a race for a paused run)."""
        async with self._db.connection() as conn:
            await conn.execute(self._sql["give_back"], (self._key(account), today or today_utc()))

    async def reserve(self, account: str, *, tokens_per_day: int | None, want: int, floor: int,
                      today: date | None = None) -> Held | QuotaRefusal:
        """Set aside `want` tokens of the account's day, or what is left when less (refused below `floor`).

        The day's row is locked while it is read and raised, so concurrent reservations in any number of processes
        queue on it and together never pass the limit. An account without a token limit is counted all the same.
        """
        day, key = today or today_utc(), self._key(account)
        async with self._db.connection() as conn:
            if tokens_per_day is None:
                # Nothing to hold back: counted in one upsert.
                await conn.execute(self._sql["add_tokens"], (key, day, want))
                return Held(ledger=self, account=account, day=day, tokens=want)
            await conn.execute(self._sql["open_day"], (key, day))
            cursor = await conn.execute(self._sql["lock_day"], (key, day))
            used = await cursor.fetchone()
            assert used is not None
            granted = min(want, tokens_per_day - used[0])
            if granted < floor:
                return self._refused("tokens_per_day", tokens_per_day, day)
            await conn.execute(self._sql["raise"], (granted, key, day))
        return Held(ledger=self, account=account, day=day, tokens=granted)

    async def settle(self, held: Held, used: int) -> None:
        """The call's reported tokens replace its reservation, on the day it was reserved."""
        if used == held.tokens:
            return
        async with self._db.connection() as conn:
            await conn.execute(self._sql["settle"], (used - held.tokens, self._key(held.account), held.day))

    async def used(self, account: str, *, today: date | None = None) -> tuple[int, int]:
        """(requests, tokens) counted today."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(self._sql["used"], (self._key(account), today or today_utc()))
            row = await cursor.fetchone()
        return (row[0], row[1]) if row else (0, 0)

    async def day(self, day: date) -> dict[str, tuple[int, int]]:
        """Every account's (requests, tokens) counted on `day`."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(self._sql["day"], (day,))
            return {str(row[0]): (row[1], row[2]) for row in await cursor.fetchall()}

    def _refused(self, limit: QuotaLimit, allowed: int, day: date) -> QuotaRefusal:
        return self._refusal(limit, allowed, next_reset(day))


_STATEMENTS = {
    "take": "INSERT INTO {t} AS u ({a}, day, requests) VALUES (%s, %s, 1)"
            " ON CONFLICT ({a}, day) DO UPDATE SET requests = u.requests + 1"
            " WHERE (%s::integer IS NULL OR u.requests < %s) AND (%s::bigint IS NULL OR u.tokens < %s)"
            " RETURNING requests",
    "give_back": "UPDATE {t} SET requests = requests - 1 WHERE {a} = %s AND day = %s AND requests > 0",
    "add_tokens": "INSERT INTO {t} AS u ({a}, day, tokens) VALUES (%s, %s, %s)"
                  " ON CONFLICT ({a}, day) DO UPDATE SET tokens = u.tokens + EXCLUDED.tokens",
    "open_day": "INSERT INTO {t} ({a}, day) VALUES (%s, %s) ON CONFLICT ({a}, day) DO NOTHING",
    "lock_day": "SELECT tokens FROM {t} WHERE {a} = %s AND day = %s FOR UPDATE",
    "raise": "UPDATE {t} SET tokens = tokens + %s WHERE {a} = %s AND day = %s",
    "settle": "UPDATE {t} SET tokens = GREATEST(0, tokens + %s) WHERE {a} = %s AND day = %s",
    "used": "SELECT requests, tokens FROM {t} WHERE {a} = %s AND day = %s",
    "day": "SELECT {a}, requests, tokens FROM {t} WHERE day = %s ORDER BY {a}",
}
