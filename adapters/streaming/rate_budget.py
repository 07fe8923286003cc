"""A token bucket shared by many streamers, granting calls by priority, round-robin by answer.

Within a priority, calls are served by their answer's age (`answer_context`): a call that waited, got a 429
or was cut by a deadline and asks again keeps its place instead of going to the back of the queue.

Sizing from a published rate (`RateBudget.per_minute`) comes in two kinds:

- Window-safe (the default, the platform's burst allowance unknown): the burst (a tenth of a
  minute's calls) is taken out of the refill, so no 60-second window ever holds more calls than
  the rate allows.
- Platform bucket (`platform_burst` given, for a platform that counts with a token bucket, like
  Slack's chat.update tier: 50 a minute with short bursts tolerated): the burst is the platform's
  own, less `PLATFORM_BURST_RESERVE_CALLS`, and the refill is `PLATFORM_RATE_MARGIN` under the
  rate. The bucket can then never run ahead of the platform's: the reserve absorbs requests that
  reach the platform bunched up (network and event-loop jitter), and the rate margin adds to
  that slack with every call. A 60-second window may then hold the burst plus the rate, exactly
  what the platform's own bucket allows, and no more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable

from .answer_place import answer_since, counted_as_queued
from .clock import Clock
from .fair_queue import FairQueue, Priority, Waiter
from .learned_rate import LEARNED_RATE_FLOOR_PER_S, LEARNED_RATE_UNDER_MEASURED, RateLearner

# Float refills land a hair under a whole token; count those as whole so the wait loop ends.
TOKEN_EPSILON = 1e-9
SECONDS_PER_MINUTE = 60.0
# Default burst of a window-safe `per_minute`: this share of a minute's calls may go at once.
BURST_SHARE_OF_MINUTE = 0.1
# Platform-bucket sizing: calls kept back from the platform's burst against jitter, and how far
# under the platform's rate the refill runs.
PLATFORM_BURST_RESERVE_CALLS = 3.0
PLATFORM_RATE_MARGIN = 0.02
# Intermediate edits leave this many calls in the bucket (less where the bucket is smaller), so an
# answer that ends finds a call for its final text at once instead of waiting out the refill.
FINAL_RESERVE_CALLS = 1.0


class RateBudget:
    """Token bucket for one rate limit (a Slack method per workspace, a Discord channel, ...).

    `acquire` returns at once while tokens last and no one is queued; otherwise waiters are served
    as tokens refill (in the order of fair_queue.py): every waiting FINAL first, then FIRST, each by its answer's age (the oldest answer
    first: `since`, see `answer_context`; a FIRST of an answer older than the oldest FINAL's goes before
    it, both being first texts), then INTERMEDIATE round-robin across requester keys, so no answer
    starves and a call asked again (after a 429, a deadline) is not sent to the back. An intermediate
    edit is granted only while `FINAL_RESERVE_CALLS` stay in the bucket after it, so a final never waits
    behind the streaming edits that spent its call. One bounded exception: a final that replaces text
    already shown lets first texts (finals that are an answer's first text, and FIRST requests) of
    answers up to `SHOWN_TEXT_FINAL_DEFER_S` younger than its own go ahead, so a burst of answers shows
    every answer's first text before it polishes the ones already showing. A waiter can be promoted to
    FINAL while it waits (its answer ended). `penalize` (on a 429) pauses the whole bucket.

    `parent`: a wider limit this one also counts against (Slack's workspace-wide chat.postMessage
    over each channel's, Discord's per-bot global limit over each channel's): every call takes a
    token of both, at the same priority, and a 429 pauses both, since a 429 rarely says its scope.
    `learns`: a limit whose number the platform does not publish. A 429 slows it down (and the burst);
    quiet stretches grow it back towards where it started. `known_limit` (the operator told the number):
    a 429 slows it by a tenth. Otherwise the starting rate is a guess: a 429 halves it, and two
    overloads close together measure the limit (see learned_rate.py).
    `window_s`: a window-safe budget (its burst plus a window's refill is what one window allows): a share's burst,
    rounded up to one call, comes out of that share's refill, so N processes' windows together never hold more.
    """

    def __init__(
        self, *, capacity: float, refill_per_s: float, clock: Clock, parent: RateBudget | None = None,
        learns: bool = False, learned_floor_per_s: float = LEARNED_RATE_FLOOR_PER_S, known_limit: bool = True,
        window_s: float | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least one call")
        if refill_per_s <= 0:
            raise ValueError("refill_per_s must be positive")
        self._capacity = float(capacity)
        self._refill_per_s = float(refill_per_s)
        self._clock = clock
        self._parent = parent
        self._window_s = window_s
        self._learner = RateLearner(
            capacity=self._capacity, refill_per_s=self._refill_per_s, floor_per_s=learned_floor_per_s,
            known_limit=known_limit,
        ) if learns else None
        # The last moment it was drawn on or paused until: from then on it refills towards full.
        self._busy_until = clock.now()
        self._tokens = self._capacity
        self._updated_at = clock.now()
        self._paused_until = float("-inf")
        self._queue = FairQueue()
        self._dispatcher: asyncio.Task[None] | None = None
        # Its numbers stand for this share of the limit they were built for (`set_share`); at share 0 it grants
        # nothing. The learner's numbers are in the last share above 0.
        self._share = 1.0
        self._learner_share = 1.0
        self._whole = (self._capacity, self._refill_per_s)
        # Told the platform's rate (calls a second, for the whole limit) when two overloads here measured it.
        self.on_measured: Callable[[float], None] | None = None

    @classmethod
    def per_minute(
        cls,
        calls_per_minute: float,
        *,
        share: float = 1.0,
        clock: Clock,
        burst: float | None = None,
        platform_burst: float | None = None,
    ) -> RateBudget:
        """A budget for `calls_per_minute × share` calls a minute (see the module docstring).

        Window-safe unless `platform_burst` is given: `burst` (default a tenth of a minute's
        calls, at least one) is taken out of the refill. With `platform_burst` (the platform's
        own bucket size, before `share`), the burst is that less a reserve, the refill a little
        under the rate.
        """
        if calls_per_minute <= 0 or not 0 < share <= 1:
            raise ValueError("calls_per_minute must be positive and share in (0, 1]")
        if burst is not None and platform_burst is not None:
            raise ValueError("give burst (window-safe) or platform_burst, not both")
        allowed = calls_per_minute * share
        if platform_burst is not None:
            if platform_burst < 1:
                raise ValueError("platform_burst must be at least one call")
            capacity = max(1.0, (platform_burst - PLATFORM_BURST_RESERVE_CALLS) * share)
            refill_per_minute = allowed * (1 - PLATFORM_RATE_MARGIN)
        else:
            capacity = burst if burst is not None else max(1.0, allowed * BURST_SHARE_OF_MINUTE)
            # Tiny budgets cannot honour the window bound exactly; keep at least half the rate.
            refill_per_minute = max(allowed - capacity, allowed / 2)
        return cls(
            capacity=capacity, refill_per_s=refill_per_minute / SECONDS_PER_MINUTE, clock=clock
        )

    @property
    def capacity(self) -> float:
        return self._capacity

    def place(self) -> float:
        """Where a call asked now stands within its priority: its answer's start inside an answer's task
        (`answer_context`), else now. Asked once, it keeps a call's place over its retries."""
        since = answer_since()
        return self._clock.now() if since is None else since

    @property
    def refill_per_s(self) -> float:
        return self._refill_per_s

    @property
    def share(self) -> float:
        return self._share

    def set_share(self, share: float) -> None:
        """From now on, `share` of the limit its numbers were built for (0: nothing until a share comes back), the
        burst too (at least one call). Callers waiting stay queued in their order; tokens over the new share are given up."""
        if not 0 <= share <= 1:
            raise ValueError("share must be in [0, 1]")
        if share == self._share:
            return
        self._refill()
        before, self._share = self._share, share
        if share > 0:
            whole_capacity, whole_refill = self._whole
            self._capacity = max(1.0, whole_capacity * share)
            self._refill_per_s = whole_refill * share
            if self._window_s is not None:
                rounded_up = self._capacity - whole_capacity * share
                self._refill_per_s = max(self._refill_per_s - rounded_up / self._window_s, self._refill_per_s / 2)
            if self._learner is not None:
                self._learner.rescale(share / self._learner_share)
                self._learner_share = share
            kept = self._tokens * share / before if share < before else self._tokens
            self._tokens = min(self._capacity, kept)
        else:
            self._tokens = 0.0
        if self._queue.has_waiters():
            self._restart_dispatcher()

    def take_measured(self, per_s: float) -> None:
        """Another process measured the platform's limit at `per_s` calls a second (the whole limit): this budget
        goes no faster than its share of a little under it, and grows back no further, as if measured here."""
        if self._learner is None or per_s <= 0:
            return
        self._refill()
        own = per_s * self._learner_share
        self._learner.adopt(self._clock.now(), own)
        slower = own * LEARNED_RATE_UNDER_MEASURED
        if self._share > 0 and slower < self._refill_per_s:
            factor = slower / self._refill_per_s
            self._refill_per_s = slower
            self._capacity = max(1.0, self._capacity * factor)
            self._tokens = min(self._tokens, self._capacity)
            self._keep_whole()

    def _keep_whole(self) -> None:
        """The learner changed the numbers: they stand for the share in use."""
        if self._share > 0:
            self._whole = (self._capacity / self._share, self._refill_per_s / self._share)

    async def acquire(
        self,
        priority: Priority,
        requester_key: Hashable = None,
        *,
        shows_text: bool = False,
        promote: asyncio.Event | None = None,
        since: float | None = None,
    ) -> None:
        """Waits for one call's token. Cancelling the wait gives back a token already granted.

        `shows_text`: the message already shows answer text (a FINAL then defers to finals that
        are first texts, see `SHOWN_TEXT_FINAL_DEFER_S`). `promote`: when set while a FIRST or
        INTERMEDIATE request waits, the request becomes a FINAL one (its answer has ended).
        `since`: the call's place within its priority (default `place()`: its answer's start, else now).
        """
        since = self.place() if since is None else since
        self._busy_until = max(self._busy_until, self._clock.now())
        try:
            await self._acquire_own(priority, requester_key, shows_text=shows_text, promote=promote, since=since)
        finally:
            self._busy_until = max(self._busy_until, self._clock.now())
        if self._parent is None:
            return
        try:
            await self._parent.acquire(priority, requester_key, shows_text=shows_text, promote=promote, since=since)
        except BaseException:
            self._release_own()
            raise

    async def _acquire_own(
        self, priority: Priority, requester_key: Hashable, *, shows_text: bool, promote: asyncio.Event | None,
        since: float,
    ) -> None:
        if not self._queue.has_waiters() and self._take(self._reserve_for(priority)):
            return
        promoted = promote is not None and promote.is_set()
        waiter = Waiter(
            future=asyncio.get_running_loop().create_future(),
            key=requester_key,
            shows_text=shows_text,
            since=since,
            level=Priority.FINAL if promoted else priority,
        )
        self._queue.add(waiter)
        if waiter.level is Priority.INTERMEDIATE:
            self._ensure_dispatcher()
        else:
            # The dispatcher may be asleep until an intermediate's reserve refills: this one needs less.
            self._restart_dispatcher()
        try:
            with counted_as_queued():
                if promote is not None and waiter.level is not Priority.FINAL:
                    await self._wait_or_promote(waiter, promote)
                await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self._release_own()
            else:
                waiter.future.cancel()
            raise

    def try_acquire(self, priority: Priority | None = None, *, shows_text: bool = False) -> bool:
        """A token now or never. With no `priority`, only when nothing else waits (a typing indicator);
        with one, when no waiter would go before a request of that priority (a final takes the call
        intermediate edits leave in reserve, see `FINAL_RESERVE_CALLS`)."""
        if self._queue.waiters_ahead(priority, shows_text=shows_text) or not self._take(self._reserve_for(priority)):
            return False
        if self._parent is not None and not self._parent.try_acquire(priority, shows_text=shows_text):
            self._release_own()
            return False
        return True

    def _reserve_for(self, priority: Priority | None) -> float:
        """Calls a grant at `priority` must leave in the bucket: intermediates keep one for a final."""
        if priority is Priority.INTERMEDIATE:
            return max(0.0, min(FINAL_RESERVE_CALLS, self._capacity - 1))
        return 0.0

    def release(self) -> None:
        """Gives back a token that was granted but not spent (the parent's too)."""
        self._release_own()
        if self._parent is not None:
            self._parent.release()

    def _release_own(self) -> None:
        self._refill()
        self._tokens = min(self._capacity, self._tokens + 1)
        if self._queue.has_waiters():
            # A dispatcher asleep until the next refill would leave this token unused till then.
            self._restart_dispatcher()

    def _restart_dispatcher(self) -> None:
        if self._dispatcher is not None and not self._dispatcher.done():
            self._dispatcher.cancel()
        self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch())

    def penalize(self, retry_after_s: float, *, wide: bool = True) -> None:
        """The platform said 429: send nothing until `retry_after_s` from now, then one call.

        The parent is paused too unless the platform said the limit was this one's own (`wide=False`):
        a 429 that does not say its scope may have been the wider limit. A learning budget slows down."""
        if self._parent is not None and wide:
            self._parent.penalize(retry_after_s)
            if self._drawn_at_most_one():
                # Nothing but the refused call drew on this limit within its refill: it cannot have been the
                # one exceeded. Not pausing it keeps the call's place in the parent's queue for its retry.
                return
        resume_at = self._clock.now() + max(0.0, retry_after_s)
        if self._learner is not None:
            self._slow_down(resume_at)
        self._busy_until = max(self._busy_until, resume_at)
        if resume_at <= self._paused_until:
            return
        self._paused_until = resume_at
        # The server's window is full: refill restarts when the pause ends, with the one call
        # the server promised.
        self._tokens = 1.0
        self._updated_at = resume_at

    async def _wait_or_promote(self, waiter: Waiter, promote: asyncio.Event) -> None:
        promoted = asyncio.ensure_future(promote.wait())
        try:
            await asyncio.wait({waiter.future, promoted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            promoted.cancel()
        if not waiter.future.done():
            self._queue.promote(waiter)
            self._restart_dispatcher()

    def idle(self, *, for_s: float = 0.0) -> bool:
        """Nobody waits and nobody drew on it since it would be full again (plus `for_s`): a new budget
        would be in the same state."""
        now = self._clock.now()
        return not self._queue.has_waiters() and now - self._busy_until > self._capacity / self._refill_per_s + for_s

    def _slow_down(self, resume_at: float) -> None:
        assert self._learner is not None
        measures = self._learner.measures
        rate = self._learner.slower(self._clock.now(), resume_at, self._refill_per_s)
        if rate is None:
            return
        factor = min(1.0, rate / self._refill_per_s)
        self._refill_per_s *= factor
        self._capacity = max(1.0, self._capacity * factor)
        self._tokens = min(self._tokens, self._capacity)
        self._keep_whole()
        measured = self._learner.latest_measure
        if self.on_measured is not None and measured is not None and self._learner.measures > measures:
            self.on_measured(measured / self._learner_share)

    def _refill(self) -> None:
        now = self._clock.now()
        if self._share == 0:
            self._tokens, self._updated_at = 0.0, now
            return
        if self._learner is not None and (grown := self._learner.recovered(now, self._capacity, self._refill_per_s)):
            self._capacity, self._refill_per_s = grown
            self._keep_whole()
        if now > self._updated_at:
            elapsed = now - self._updated_at
            self._tokens = min(self._capacity, self._tokens + elapsed * self._refill_per_s)
            self._updated_at = now

    def _drawn_at_most_one(self) -> bool:
        self._refill()
        return self._clock.now() >= self._paused_until and self._tokens >= self._capacity - 1 - TOKEN_EPSILON

    def _take(self, reserve: float = 0.0) -> bool:
        """One token, if `reserve` more stay in the bucket after it."""
        self._refill()
        if self._share == 0 or self._clock.now() < self._paused_until or self._tokens < 1 + reserve - TOKEN_EPSILON:
            return False
        self._tokens = max(0.0, self._tokens - 1)
        if self._learner is not None:
            self._learner.granted(self._clock.now())
        return True

    def _ensure_dispatcher(self) -> None:
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch())

    async def _dispatch(self) -> None:
        # One task per budget hands out tokens while anyone waits, then ends.
        while self._queue.has_waiters():
            if self._share == 0:
                return  # set_share starts it again
            reserve = self._reserve_for(self._queue.next_level())
            if self._take(reserve):
                self._queue.pop_next().future.set_result(None)
                continue
            now = self._clock.now()
            if now < self._paused_until:
                await self._clock.sleep(self._paused_until - now)
            else:
                await self._clock.sleep(max(0.0, 1 + reserve - self._tokens) / self._refill_per_s)
