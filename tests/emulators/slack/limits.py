"""Slack's per-method rate limits as token buckets (time-scalable), plus injected faults."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Scope = Literal["team", "channel"]


@dataclass(frozen=True, kw_only=True)
class MethodLimit:
    """`calls` per `window_s` (Slack time), refilled continuously; `burst` calls may go at once.

    Slack publishes tiers as "N per minute" and tolerates short bursts; a token bucket with a
    small capacity is the closest deterministic model, and lets a benchmark compute the bound:
    n calls need at least max(0, n - burst) / (calls / window_s) seconds.
    """

    calls: int
    window_s: float
    burst: int
    scope: Scope = "team"


# Tier 3 for chat.update (whole workspace); chat.postMessage about 1/s per channel.
DEFAULT_LIMITS: dict[str, MethodLimit] = {
    "chat.update": MethodLimit(calls=50, window_s=60.0, burst=10),
    "chat.postMessage": MethodLimit(calls=1, window_s=1.0, burst=3, scope="channel"),
    "chat.postEphemeral": MethodLimit(calls=100, window_s=60.0, burst=20),
    "chat.delete": MethodLimit(calls=50, window_s=60.0, burst=20),
    "conversations.replies": MethodLimit(calls=50, window_s=60.0, burst=50),
    "conversations.history": MethodLimit(calls=50, window_s=60.0, burst=50),
    "apps.connections.open": MethodLimit(calls=20, window_s=60.0, burst=10),
}
# Everything else: generous, so tests are never throttled by incidental calls.
GENEROUS_LIMIT = MethodLimit(calls=1000, window_s=60.0, burst=200)


@dataclass(kw_only=True)
class _Bucket:
    tokens: float
    updated_s: float


class RateLimiter:
    """Answers "may this call go now?" and, if not, how many real seconds until it may."""

    def __init__(
        self,
        *,
        time_scale: float,
        limits: dict[str, MethodLimit],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._scale = time_scale
        self._limits = limits
        self._clock = clock
        self._buckets: dict[tuple[str, str, str], _Bucket] = {}

    def limit_for(self, method: str) -> MethodLimit:
        return self._limits.get(method, GENEROUS_LIMIT)

    def refill_per_s(self, method: str) -> float:
        """Tokens per real second for `method` (its rate after time scaling)."""
        limit = self.limit_for(method)
        return limit.calls / (limit.window_s * self._scale)

    def try_acquire(self, method: str, *, team_id: str, channel: str | None) -> float | None:
        """Take one token; None when allowed, else the real seconds until a token is available."""
        limit = self.limit_for(method)
        scope_key = (channel or "") if limit.scope == "channel" else ""
        key = (method, team_id, scope_key)
        now = self._clock()
        rate = self.refill_per_s(method)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(tokens=float(limit.burst), updated_s=now)
        bucket.tokens = min(float(limit.burst), bucket.tokens + (now - bucket.updated_s) * rate)
        bucket.updated_s = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return (1.0 - bucket.tokens) / rate


def retry_after_header(wait_s: float) -> str:
    """Slack sends whole seconds and slack_sdk parses with int(): scaled waits round up to >= 1."""
    return str(max(1, math.ceil(wait_s)))


@dataclass(kw_only=True)
class Fault:
    """An injected failure for the next `times` calls of a method."""

    error: str
    http_status: int
    times: int
    retry_after_s: int
