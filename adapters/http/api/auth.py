"""Who is calling: the bearer key (401 without a live one), the day's quota taken (429 past it), and the key's sources."""

from __future__ import annotations

from datetime import datetime, timezone

from aiohttp import web

from adapters.http.api.errors import ApiError
from core.api_access import ApiKey, ApiKeys
from core.quota import QuotaRefusal
from core.requests import Actor


async def authenticate(request: web.Request, keys: ApiKeys) -> ApiKey:
    scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
    key = await keys.authenticate(secret.strip()) if scheme.lower() == "bearer" and secret.strip() else None
    if key is None:
        raise ApiError(401, "A valid API key is required: send `Authorization: Bearer <key>`.", "invalid_api_key",
                       headers={"WWW-Authenticate": "Bearer"})
    return key


async def take_quota(keys: ApiKeys, key: ApiKey) -> None:
    """Count this request against the key's day, or refuse it with 429 (counted nowhere)."""
    refusal = await keys.take_request(key)
    if refusal is not None:
        raise quota_error(refusal)


def quota_error(refusal: QuotaRefusal) -> ApiError:
    """429 with the refusal's sentence (core.api_access.quota_refusal words it for every surface)."""
    resets = refusal.resets_at.astimezone(timezone.utc)
    retry_after = max(1, int((resets - datetime.now(timezone.utc)).total_seconds()))
    return ApiError(
        429, refusal.sentence, "quota_exceeded",
        # The openai client retries a 429 unless told not to; waiting a few seconds would not help.
        headers={"x-should-retry": "false", "Retry-After": str(retry_after)},
        extra={"limit": refusal.limit, "allowed": refusal.allowed, "resets_at": resets.isoformat()},
    )


def refusal_of(error: dict[str, object]) -> QuotaRefusal | None:
    """The quota refusal an API `error` event carries (kind `quota`), or None."""
    if error.get("kind") != "quota":
        return None
    return QuotaRefusal(limit=str(error["limit"]), allowed=int(str(error["allowed"])),
                        resets_at=datetime.fromisoformat(str(error["resets_at"])), sentence=str(error["message"]))


def actor_for(key: ApiKey) -> Actor:
    """The key acts as the asker, so it may decide its own paused calls (the requester's right)."""
    return Actor(id=f"api-key:{key.id}", name=key.name)


def scoped_sources(key: ApiKey, requested: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The sources a request may use: the key's, narrowed by the request's (None: every source)."""
    if key.sources is None:
        return requested
    if requested is None:
        return key.sources
    return tuple(name for name in requested if name in key.sources)
