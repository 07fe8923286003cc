"""API keys in Postgres: stored hashed, scoped to sources, with daily request and token quotas taken atomically."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import date, datetime, time, timedelta, timezone

import psycopg

from core.api_access import ApiKey, QuotaLimit, api_key_of, quota_refusal
from core.quota import Held, QuotaRefusal
from core.requests import Actor, ConversationKey
from core.store.db import Database

KEY_PREFIX = "rb-"
_COLUMNS = "id, name, prefix, sources, requests_per_day, tokens_per_day, created_at, revoked_at"


class ApiKeyExists(Exception):
    """A key with that name exists already."""


def hash_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _next_reset(today: date) -> datetime:
    return datetime.combine(today + timedelta(days=1), time(0), tzinfo=timezone.utc)


def _refusal(limit: QuotaLimit, allowed: int, day: date) -> QuotaRefusal:
    return quota_refusal(limit, allowed, _next_reset(day))


def _key(row: tuple) -> ApiKey:  # type: ignore[type-arg]
    return ApiKey(
        id=row[0], name=row[1], prefix=row[2], sources=tuple(row[3]) if row[3] is not None else None,
        requests_per_day=row[4], tokens_per_day=row[5], created_at=row[6], revoked_at=row[7],
    )


class ApiKeyStore:
    """Create, list, revoke and look up keys; take a day's request; reserve and settle its model calls' tokens
    (the core.quota.TokenLedger of API keys)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(
        self, name: str, *, sources: tuple[str, ...] | None = None, requests_per_day: int | None = None,
        tokens_per_day: int | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key and its secret, which is shown this once."""
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        try:
            async with self._db.connection() as conn:
                cursor = await conn.execute(
                    "INSERT INTO api_keys (name, key_hash, prefix, sources, requests_per_day, tokens_per_day)"
                    f" VALUES (%s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}",
                    (name, hash_secret(secret), secret[:8], list(sources) if sources is not None else None,
                     requests_per_day, tokens_per_day),
                )
                row = await cursor.fetchone()
        except psycopg.errors.UniqueViolation:
            raise ApiKeyExists(name) from None
        assert row is not None
        return _key(row), secret

    async def list(self) -> list[ApiKey]:
        async with self._db.connection() as conn:
            cursor = await conn.execute(f"SELECT {_COLUMNS} FROM api_keys ORDER BY name")
            return [_key(row) for row in await cursor.fetchall()]

    async def revoke(self, name: str) -> bool:
        """True when a live key of that name was revoked."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "UPDATE api_keys SET revoked_at = now() WHERE name = %s AND revoked_at IS NULL", (name,)
            )
            return cursor.rowcount == 1

    async def authenticate(self, secret: str) -> ApiKey | None:
        """The live key with this secret, or None."""
        if not secret.startswith(KEY_PREFIX):
            return None
        digest = hash_secret(secret)
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                f"SELECT {_COLUMNS}, key_hash FROM api_keys WHERE key_hash = %s AND revoked_at IS NULL", (digest,)
            )
            row = await cursor.fetchone()
        # The lookup is by hash; the comparison again in constant time costs nothing.
        if row is None or not hmac.compare_digest(bytes(row[-1]), digest):
            return None
        return _key(row[:-1])

    async def take_request(self, key: ApiKey, *, today: date | None = None) -> QuotaRefusal | None:
        """Count one request for today, unless a limit is reached: then nothing is counted and the refusal says which.

        One conditional upsert: concurrent requests in any number of processes never take more than the limit.
        """
        day = today or datetime.now(timezone.utc).date()
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "INSERT INTO api_key_usage AS u (key_id, day, requests) VALUES (%s, %s, 1)"
                " ON CONFLICT (key_id, day) DO UPDATE SET requests = u.requests + 1"
                " WHERE (%s::integer IS NULL OR u.requests < %s) AND (%s::bigint IS NULL OR u.tokens < %s)"
                " RETURNING requests",
                (key.id, day, key.requests_per_day, key.requests_per_day, key.tokens_per_day, key.tokens_per_day),
            )
            taken = await cursor.fetchone()
            if taken is not None and (key.requests_per_day is None or taken[0] <= key.requests_per_day):
                return None
            if taken is not None:
                # A limit of 0: the first row was inserted over it. Undo within this transaction.
                await conn.rollback()
                return _refusal("requests_per_day", key.requests_per_day or 0, day)
            cursor = await conn.execute(
                "SELECT requests, tokens FROM api_key_usage WHERE key_id = %s AND day = %s", (key.id, day)
            )
            row = await cursor.fetchone()
        if row is not None and key.tokens_per_day is not None and row[1] >= key.tokens_per_day:
            return _refusal("tokens_per_day", key.tokens_per_day, day)
        return _refusal("requests_per_day", key.requests_per_day or 0, day)

    async def give_back(self, key: ApiKey, *, today: date | None = None) -> None:
        """Uncount a request taken today that was refused after all (it lost a race for a paused run)."""
        day = today or datetime.now(timezone.utc).date()
        async with self._db.connection() as conn:
            await conn.execute(
                "UPDATE api_key_usage SET requests = requests - 1 WHERE key_id = %s AND day = %s AND requests > 0",
                (key.id, day),
            )

    def account(self, conversation: ConversationKey, user: Actor) -> str | None:
        """An API conversation's key pays for its model calls; chat conversations are no key's."""
        key_id = api_key_of(conversation)
        return None if key_id is None else str(key_id)

    async def reserve(self, account: str, *, want: int, floor: int, today: date | None = None) -> Held | QuotaRefusal:
        """Set aside `want` tokens of the key's day, or what is left when less (refused below `floor`).

        The day's row is locked while it is read and raised, so concurrent reservations in any number of processes
        queue on it and together never pass the limit. A key without a token limit is counted all the same.
        """
        key_id, day = int(account), today or datetime.now(timezone.utc).date()
        async with self._db.connection() as conn:
            cursor = await conn.execute("SELECT tokens_per_day FROM api_keys WHERE id = %s", (key_id,))
            row = await cursor.fetchone()
            limit = row[0] if row is not None else None
            if limit is None:
                # Nothing to hold back: counted in one upsert, for `relaybot keys list`.
                await conn.execute(
                    "INSERT INTO api_key_usage AS u (key_id, day, tokens) VALUES (%s, %s, %s)"
                    " ON CONFLICT (key_id, day) DO UPDATE SET tokens = u.tokens + EXCLUDED.tokens",
                    (key_id, day, want),
                )
                return Held(ledger=self, account=account, day=day, tokens=want)
            await conn.execute(
                "INSERT INTO api_key_usage (key_id, day) VALUES (%s, %s) ON CONFLICT (key_id, day) DO NOTHING",
                (key_id, day),
            )
            cursor = await conn.execute(
                "SELECT tokens FROM api_key_usage WHERE key_id = %s AND day = %s FOR UPDATE", (key_id, day)
            )
            used = await cursor.fetchone()
            assert used is not None
            granted = min(want, limit - used[0])
            if granted < floor:
                return _refusal("tokens_per_day", limit, day)
            await conn.execute(
                "UPDATE api_key_usage SET tokens = tokens + %s WHERE key_id = %s AND day = %s", (granted, key_id, day)
            )
        return Held(ledger=self, account=account, day=day, tokens=granted)

    async def settle(self, held: Held, used: int) -> None:
        """The call's reported tokens replace its reservation, on the day it was reserved."""
        if used == held.tokens:
            return
        async with self._db.connection() as conn:
            await conn.execute(
                "UPDATE api_key_usage SET tokens = GREATEST(0, tokens + %s) WHERE key_id = %s AND day = %s",
                (used - held.tokens, int(held.account), held.day),
            )

    async def used(self, key: ApiKey, *, today: date | None = None) -> tuple[int, int]:
        """(requests, tokens) counted today."""
        day = today or datetime.now(timezone.utc).date()
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT requests, tokens FROM api_key_usage WHERE key_id = %s AND day = %s", (key.id, day)
            )
            row = await cursor.fetchone()
        return (row[0], row[1]) if row else (0, 0)
