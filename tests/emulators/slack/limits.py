"""Slack's per-method rate limits as token buckets (time-scalable), a workspace-wide chat.postMessage cap,
plus injected faults (scheduled, or a seeded random share of calls answered 429)."""

from __future__ import annotations

import math
import random
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
    # Native streams: starting one is a low tier (Tier 2), appending Tier 4; stopping counted like starting.
    "chat.startStream": MethodLimit(calls=20, window_s=60.0, burst=5),
    # reactions.add is Tier 3, reactions.remove Tier 2; setStatus has "special" limits, generous for one a reply.
    "reactions.add": MethodLimit(calls=50, window_s=60.0, burst=20),
    "reactions.remove": MethodLimit(calls=20, window_s=60.0, burst=10),
    "assistant.threads.setStatus": MethodLimit(calls=600, window_s=60.0, burst=100),
    "chat.appendStream": MethodLimit(calls=100, window_s=60.0, burst=20),
    "chat.stopStream": MethodLimit(calls=20, window_s=60.0, burst=5),
    "views.publish": MethodLimit(calls=100, window_s=60.0, burst=20),
    # Listing a workspace's channels and people: Tier 2 (20+ a minute).
    "conversations.list": MethodLimit(calls=20, window_s=60.0, burst=5),
    "users.list": MethodLimit(calls=20, window_s=60.0, burst=5),
    # What learning from channels reads: conversations.info and users.conversations Tier 3, conversations.members,
    # users.info and chat.getPermalink Tier 4.
    "conversations.info": MethodLimit(calls=50, window_s=60.0, burst=20),
    "users.conversations": MethodLimit(calls=50, window_s=60.0, burst=20),
    "conversations.members": MethodLimit(calls=100, window_s=60.0, burst=20),
    "users.info": MethodLimit(calls=100, window_s=60.0, burst=50),
    "chat.getPermalink": MethodLimit(calls=100, window_s=60.0, burst=20),
}
# Everything else: generous, so tests are never throttled by incidental calls.
GENEROUS_LIMIT = MethodLimit(calls=1000, window_s=60.0, burst=200)
# The name of the workspace-wide chat.postMessage cap among the limits. Slack documents one
# besides the 1/s per channel, without a number; it is off unless a test sets it.
WORKSPACE_POST_LIMIT = "chat.postMessage/workspace"


def workspace_post_cap(calls_per_minute: int, *, burst: int | None = None) -> MethodLimit:
    """A cap on chat.postMessage across all channels of a workspace (burst: a tenth of a minute's calls)."""
    if calls_per_minute < 1:
        raise ValueError("calls_per_minute must be at least 1")
    return MethodLimit(calls=calls_per_minute, window_s=60.0, burst=burst or max(1, calls_per_minute // 10))


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
        return self.try_acquire_all((method,), team_id=team_id, channel=channel)

    def try_acquire_all(self, names: tuple[str, ...], *, team_id: str, channel: str | None) -> float | None:
        """One token from each named limit, or none at all: None when every limit allows the call, else
        the real seconds until all of them would (a refused call costs no limit a token)."""
        buckets = [(self._refilled(name, team_id=team_id, channel=channel), self.refill_per_s(name)) for name in names]
        waits = [(1.0 - bucket.tokens) / rate for bucket, rate in buckets if bucket.tokens < 1.0]
        if waits:
            return max(waits)
        for bucket, _rate in buckets:
            bucket.tokens -= 1.0
        return None

    def _refilled(self, name: str, *, team_id: str, channel: str | None) -> _Bucket:
        limit = self.limit_for(name)
        scope_key = (channel or "") if limit.scope == "channel" else ""
        key = (name, team_id, scope_key)
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(tokens=float(limit.burst), updated_s=now)
        bucket.tokens = min(float(limit.burst), bucket.tokens + (now - bucket.updated_s) * self.refill_per_s(name))
        bucket.updated_s = now
        return bucket


def retry_after_header(wait_s: float, *, time_scale: float = 1.0) -> str:
    """Slack sends whole seconds (at least one): `wait_s` real seconds rounded up to whole Slack seconds, given in real
    seconds — fractional on a scaled emulator, so a 429's pause is as long against a scaled minute as Slack's is
    against a real one (a whole real second would be twenty Slack seconds at 0.05). The bot parses it as a float."""
    slack_s = max(1, math.ceil(wait_s / time_scale - 1e-9))
    return f"{slack_s * time_scale:g}"


@dataclass(kw_only=True)
class Fault:
    """An injected failure for the next `times` calls of a method."""

    error: str
    http_status: int
    times: int
    retry_after_s: int


@dataclass(frozen=True, kw_only=True)
class CallFault:
    """What a fault plan (SlackEmulator.fault_plan) does to one call: "ratelimited" (429 before the work, with a
    Retry-After of `retry_after_s` real seconds, fractional on a scaled emulator), "dropped" (the connection drops
    before Slack reads the call: nothing done), "lost" (done, then the connection drops before the reply),
    "error_after_work" (done, then answered 500 internal_error) or "slow_reply" (done, answered after `delay_s` real
    seconds: longer than a caller's timeout, the caller never sees it)."""

    kind: Literal["ratelimited", "dropped", "lost", "error_after_work", "slow_reply"]
    retry_after_s: float = 1.0
    delay_s: float = 0.0


class RandomRateLimits:
    """Answers a seeded random `fraction` of calls 429, with a `Retry-After` drawn from `retry_after_s`
    (whole real seconds, as Slack sends them), for fault tests that must not depend on timing."""

    def __init__(
        self, *, fraction: float, retry_after_s: tuple[int, int], seed: int, methods: frozenset[str] | None
    ) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError("fraction must be within [0, 1]")
        low, high = retry_after_s
        if not 1 <= low <= high:
            raise ValueError("retry_after_s must be (low, high) with 1 <= low <= high")
        self._fraction = fraction
        self._retry_after_s = (low, high)
        self._random = random.Random(seed)
        self._methods = methods
        self.count = 0

    def draw(self, method: str) -> int | None:
        """The Retry-After to answer this call with, or None to let it through."""
        if self._methods is not None and method not in self._methods:
            return None
        if self._random.random() >= self._fraction:
            return None
        self.count += 1
        return self._random.randint(*self._retry_after_s)


class RandomShare:
    """Picks a seeded random `fraction` of calls (to `methods`, None: every method), e.g. replies to lose. Each
    method draws from its own seeded sequence: its n-th call is picked or not whatever the other methods did."""

    def __init__(self, *, fraction: float, seed: int, methods: frozenset[str] | None) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError("fraction must be within [0, 1]")
        self._fraction = fraction
        self._seed = seed
        self._randoms: dict[str, random.Random] = {}
        self._methods = methods
        self.count = 0

    def draw(self, method: str) -> bool:
        if self._methods is not None and method not in self._methods:
            return False
        drawn = self._randoms.setdefault(method, random.Random(f"{self._seed}:{method}"))
        if drawn.random() >= self._fraction:
            return False
        self.count += 1
        return True


class Incident:
    """A Slack incident: every Web API call fails until it ends, a seeded `share_503` of them with 503
    `service_unavailable`, the others 429 `ratelimited` with a Retry-After (whole seconds) from `retry_after_s`."""

    def __init__(self, *, share_503: float, retry_after_s: tuple[int, int], seed: int) -> None:
        low, high = retry_after_s
        if not 1 <= low <= high:
            raise ValueError("retry_after_s must be (low, high) with 1 <= low <= high")
        self._share_503 = share_503
        self._retry_after_s = (low, high)
        self._random = random.Random(seed)
        self.count_503 = 0
        self.count_429 = 0

    def draw(self) -> tuple[int, str, dict[str, str]]:
        """(HTTP status, error, headers) for the next call."""
        if self._random.random() < self._share_503:
            self.count_503 += 1
            return 503, "service_unavailable", {}
        self.count_429 += 1
        return 429, "ratelimited", {"Retry-After": str(self._random.randint(*self._retry_after_s))}
