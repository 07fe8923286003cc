"""API keys in Postgres: stored hashed, scoped to sources, with daily request and token quotas taken atomically."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import date

import psycopg

from core.api_access import API_PLATFORM, ApiKey, api_key_of, quota_refusal
from core.quota import DayLimits, Held, QuotaRefusal
from core.requests import Actor, ConversationKey
from core.store.day_counts import DayCounts
from core.store.db import Database

KEY_PREFIX = "rb-"
_COLUMNS = "id, name, prefix, sources, requests_per_day, tokens_per_day, created_at, revoked_at"


class ApiKeyExists(Exception):
    """A key with that name exists already."""


def hash_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _key(row: tuple) -> ApiKey:  # type: ignore[type-arg]
    return ApiKey(
        id=row[0], name=row[1], prefix=row[2], sources=tuple(row[3]) if row[3] is not None else None,
        requests_per_day=row[4], tokens_per_day=row[5], created_at=row[6], revoked_at=row[7],
    )


class ApiKeyStore:
    """Create, list, revoke and look up keys; take a day's request; reserve and settle its model calls' tokens
    (the core.quota.TokenLedger of API keys)."""

    platform = API_PLATFORM  # only the HTTP API's conversations are a key's

    def __init__(self, db: Database) -> None:
        self._db = db
        # The keys' ledger: one kind with people's limits (core/store/day_counts.py), over the keys' own table.
        self._counts = DayCounts(db, table="api_key_usage", account_column="key_id", refusal=quota_refusal, key=int)

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
        """Count one request for today, unless a limit is reached: then nothing is counted and the refusal says which."""
        return await self._counts.take_request(str(key.id), _limits(key), today=today)

    async def give_back(self, key: ApiKey, *, today: date | None = None) -> None:
        """Uncount a request taken today that was refused after all (it lost a race for a paused run)."""
        await self._counts.give_back(str(key.id), today=today)

    def account(self, conversation: ConversationKey, user: Actor) -> str | None:
        """An API conversation's key pays for its model calls; chat conversations are no key's."""
        key_id = api_key_of(conversation)
        return None if key_id is None else str(key_id)

    async def reserve(self, account: str, *, want: int, floor: int, today: date | None = None) -> Held | QuotaRefusal:
        """Set aside `want` tokens of the key's day, or what is left when less (refused below `floor`); the key's
        limit is read at each call, so a changed limit applies to the next one."""
        async with self._db.connection() as conn:
            cursor = await conn.execute("SELECT tokens_per_day FROM api_keys WHERE id = %s", (int(account),))
            row = await cursor.fetchone()
        limit = row[0] if row is not None else None
        return await self._counts.reserve(account, tokens_per_day=limit, want=want, floor=floor, today=today)

    async def used(self, key: ApiKey, *, today: date | None = None) -> tuple[int, int]:
        """(requests, tokens) counted today."""
        return await self._counts.used(str(key.id), today=today)


def _limits(key: ApiKey) -> DayLimits:
    return DayLimits(requests_per_day=key.requests_per_day, tokens_per_day=key.tokens_per_day)
