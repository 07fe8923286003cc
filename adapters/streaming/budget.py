"""A token bucket shared by many streamers, granting calls by priority, round-robin by answer."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Hashable
from enum import IntEnum

from .clock import Clock

# Float refills land a hair under a whole token; count those as whole so the wait loop ends.
TOKEN_EPSILON = 1e-9
SECONDS_PER_MINUTE = 60.0
# Default burst of `per_minute`: this share of a minute's calls may go at once.
BURST_SHARE_OF_MINUTE = 0.1


class Priority(IntEnum):
    """Who goes first when tokens are short: finals, then first texts, then intermediate edits."""

    INTERMEDIATE = 0
    FIRST = 1
    FINAL = 2


class RateBudget:
    """Token bucket for one rate limit (a Slack method per workspace, a Discord channel, ...).

    `acquire` returns at once while tokens last and no one is queued; otherwise waiters are served
    as tokens refill: every waiting FINAL first, then FIRST, both in arrival order, then
    INTERMEDIATE round-robin across requester keys, so no answer starves. `penalize` (on a 429)
    pauses the whole bucket.
    """

    def __init__(self, *, capacity: float, refill_per_s: float, clock: Clock) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least one call")
        if refill_per_s <= 0:
            raise ValueError("refill_per_s must be positive")
        self._capacity = float(capacity)
        self._refill_per_s = float(refill_per_s)
        self._clock = clock
        self._tokens = self._capacity
        self._updated_at = clock.now()
        self._paused_until = float("-inf")
        self._finals: deque[asyncio.Future[None]] = deque()
        self._firsts: deque[asyncio.Future[None]] = deque()
        self._intermediates: OrderedDict[Hashable, deque[asyncio.Future[None]]] = OrderedDict()
        self._dispatcher: asyncio.Task[None] | None = None

    @classmethod
    def per_minute(
        cls,
        calls_per_minute: float,
        *,
        share: float = 1.0,
        clock: Clock,
        burst: float | None = None,
    ) -> RateBudget:
        """A budget for `calls_per_minute × share` calls a minute.

        The burst (default a tenth of a minute's calls, at least one) is taken out of the refill,
        so no 60-second window ever holds more than the allowed number of calls.
        """
        if calls_per_minute <= 0 or not 0 < share <= 1:
            raise ValueError("calls_per_minute must be positive and share in (0, 1]")
        allowed = calls_per_minute * share
        capacity = burst if burst is not None else max(1.0, allowed * BURST_SHARE_OF_MINUTE)
        # Tiny budgets cannot honour the window bound exactly; keep at least half the rate.
        refill_per_minute = max(allowed - capacity, allowed / 2)
        return cls(
            capacity=capacity, refill_per_s=refill_per_minute / SECONDS_PER_MINUTE, clock=clock
        )

    @property
    def capacity(self) -> float:
        return self._capacity

    @property
    def refill_per_s(self) -> float:
        return self._refill_per_s

    async def acquire(self, priority: Priority, requester_key: Hashable = None) -> None:
        """Waits for one call's token. Cancelling the wait gives back a token already granted."""
        if not self._has_waiters() and self._take():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if priority is Priority.FINAL:
            self._finals.append(waiter)
        elif priority is Priority.FIRST:
            self._firsts.append(waiter)
        else:
            self._intermediates.setdefault(requester_key, deque()).append(waiter)
        self._ensure_dispatcher()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._tokens = min(self._capacity, self._tokens + 1)
            raise

    def penalize(self, retry_after_s: float) -> None:
        """The platform said 429: send nothing until `retry_after_s` from now, then one call."""
        resume_at = self._clock.now() + max(0.0, retry_after_s)
        if resume_at <= self._paused_until:
            return
        self._paused_until = resume_at
        # The server's window is full: refill restarts when the pause ends, with the one call
        # the server promised.
        self._tokens = 1.0
        self._updated_at = resume_at

    def _refill(self) -> None:
        now = self._clock.now()
        if now > self._updated_at:
            elapsed = now - self._updated_at
            self._tokens = min(self._capacity, self._tokens + elapsed * self._refill_per_s)
            self._updated_at = now

    def _take(self) -> bool:
        self._refill()
        if self._clock.now() < self._paused_until or self._tokens < 1 - TOKEN_EPSILON:
            return False
        self._tokens = max(0.0, self._tokens - 1)
        return True

    def _drop_abandoned(self) -> None:
        for queue in (self._finals, self._firsts):
            while queue and queue[0].done():
                queue.popleft()
        for key in list(self._intermediates):
            queue = self._intermediates[key]
            while queue and queue[0].done():
                queue.popleft()
            if not queue:
                del self._intermediates[key]

    def _has_waiters(self) -> bool:
        self._drop_abandoned()
        return bool(self._finals or self._firsts or self._intermediates)

    def _next_waiter(self) -> asyncio.Future[None]:
        if self._finals:
            return self._finals.popleft()
        if self._firsts:
            return self._firsts.popleft()
        key = next(iter(self._intermediates))
        queue = self._intermediates[key]
        waiter = queue.popleft()
        if queue:
            self._intermediates.move_to_end(key)
        else:
            del self._intermediates[key]
        return waiter

    def _ensure_dispatcher(self) -> None:
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch())

    async def _dispatch(self) -> None:
        # One task per budget hands out tokens while anyone waits, then ends.
        while self._has_waiters():
            if self._take():
                self._next_waiter().set_result(None)
                continue
            now = self._clock.now()
            if now < self._paused_until:
                await self._clock.sleep(self._paused_until - now)
            else:
                await self._clock.sleep((1 - self._tokens) / self._refill_per_s)
