"""API keys in Postgres: stored hashed, scoped to sources, with daily request and token quotas taken atomically."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import date, datetime, time, timedelta, timezone

import psycopg

from core.api_access import ApiKey, QuotaRefusal
from core.store.db import Database

KEY_PREFIX = "rb-"
_COLUMNS = "id, name, prefix, sources, requests_per_day, tokens_per_day, created_at, revoked_at"


class ApiKeyExists(Exception):
    """A key with that name exists already."""


def hash_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _next_reset(today: date) -> datetime:
    return datetime.combine(today + timedelta(days=1), time(0), tzinfo=timezone.utc)


def _key(row: tuple) -> ApiKey:  # type: ignore[type-arg]
    return ApiKey(
        id=row[0], name=row[1], prefix=row[2], sources=tuple(row[3]) if row[3] is not None else None,
        requests_per_day=row[4], tokens_per_day=row[5], created_at=row[6], revoked_at=row[7],
    )


class ApiKeyStore:
    """Create, list, revoke and look up keys; take a day's request and record its tokens."""

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
                return QuotaRefusal(limit="requests_per_day", allowed=key.requests_per_day or 0, resets_at=_next_reset(day))
            cursor = await conn.execute(
                "SELECT requests, tokens FROM api_key_usage WHERE key_id = %s AND day = %s", (key.id, day)
            )
            row = await cursor.fetchone()
        if row is not None and key.tokens_per_day is not None and row[1] >= key.tokens_per_day:
            return QuotaRefusal(limit="tokens_per_day", allowed=key.tokens_per_day, resets_at=_next_reset(day))
        return QuotaRefusal(limit="requests_per_day", allowed=key.requests_per_day or 0, resets_at=_next_reset(day))

    async def give_back(self, key: ApiKey, *, today: date | None = None) -> None:
        """Uncount a request taken today that was refused after all (it lost a race for a paused run)."""
        day = today or datetime.now(timezone.utc).date()
        async with self._db.connection() as conn:
            await conn.execute(
                "UPDATE api_key_usage SET requests = requests - 1 WHERE key_id = %s AND day = %s AND requests > 0",
                (key.id, day),
            )

    async def add_tokens(self, key: ApiKey, tokens: int, *, today: date | None = None) -> None:
        """Add a finished request's tokens to today's count (a request under way is never cut short by it)."""
        if tokens <= 0:
            return
        day = today or datetime.now(timezone.utc).date()
        async with self._db.connection() as conn:
            await conn.execute(
                "INSERT INTO api_key_usage AS u (key_id, day, tokens) VALUES (%s, %s, %s)"
                " ON CONFLICT (key_id, day) DO UPDATE SET tokens = u.tokens + EXCLUDED.tokens",
                (key.id, day, tokens),
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
