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
import contextvars
import heapq
import itertools
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Generic, TypeVar

from .clock import Clock

# Float refills land a hair under a whole token; count those as whole so the wait loop ends.
TOKEN_EPSILON = 1e-9
SECONDS_PER_MINUTE = 60.0
# Default burst of a window-safe `per_minute`: this share of a minute's calls may go at once.
BURST_SHARE_OF_MINUTE = 0.1
# Platform-bucket sizing: calls kept back from the platform's burst against jitter, and how far
# under the platform's rate the refill runs.
PLATFORM_BURST_RESERVE_CALLS = 3.0
PLATFORM_RATE_MARGIN = 0.02
# A final whose message already shows answer text lets finals that are an answer's first text
# (its message still shows the placeholder) go first, but only those requested up to this many
# seconds after it, so it never starves.
SHOWN_TEXT_FINAL_DEFER_S = 60.0
# Learning from 429s (`learns=True`): a 429 slows a told limit by a tenth (LEARNED_RATE_UNDER_ACCEPTED);
# a guessed one it halves, but not below a little under the most the platform accepted in a minute
# lately (Slack's limits are per minute). Neither goes below the floor. 429s within the pause of the
# one that slowed it down are the same overload and count once. After LEARNED_RATE_RECOVER_AFTER_S
# without one, the rate grows back by a quarter each time, up to where it started.
LEARNED_RATE_FLOOR_PER_S = 1.0 / SECONDS_PER_MINUTE
LEARNED_RATE_DECREASE = 0.5
LEARNED_RATE_UNDER_ACCEPTED = 0.9
LEARNING_WINDOW_S = SECONDS_PER_MINUTE
# How long the most calls accepted in a minute is remembered as a floor (limits can change).
LEARNING_MEMORY_S = 10 * SECONDS_PER_MINUTE
# ... unless the platform refused this share of the calls in the last minute: then the limit went down.
LIMIT_WENT_DOWN_REFUSED_SHARE = 0.25
LEARNED_RATE_RECOVERY = 1.25
LEARNED_RATE_RECOVER_AFTER_S = 10.0
# An unknown limit (`known_limit=False`) is measured by two overloads close together: the platform's
# bucket was empty at both, so the calls it accepted in between, over the time between them, are its
# rate. The platform accepted that much, so the limit is at least the most measured in MEASURE_MEMORY_S
# (429s of other causes only measure less): a measured overload slows down to a little under that
# rather than by half, but a tenth at least (a limit that went down is found in a few overloads), and
# the rate grows back quickly only up to it, so a limit that drew 429s is not probed every few seconds.
MEASURE_WITHIN_S = SECONDS_PER_MINUTE
MEASURE_MEMORY_S = 3 * SECONDS_PER_MINUTE
LEARNED_RATE_UNDER_MEASURED = 0.95
# Intermediate edits leave this many calls in the bucket (less where the bucket is smaller), so an
# answer that ends finds a call for its final text at once instead of waiting out the refill.
FINAL_RESERVE_CALLS = 1.0


class Priority(IntEnum):
    """Who goes first when tokens are short: finals, then first texts, then intermediate edits."""

    INTERMEDIATE = 0
    FIRST = 1
    FINAL = 2


class QueueWait:
    """How long the calls of one task waited in budget queues (platform time), so a deadline on the
    call counts only the time it spent with the platform (see `StreamLimits.call_timeout_s`)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._waiting = 0
        self._since = 0.0
        self._waited_s = 0.0

    def waited_s(self) -> float:
        """Seconds spent queued so far, a wait under way included."""
        ongoing = self._clock.now() - self._since if self._waiting else 0.0
        return self._waited_s + ongoing

    @contextmanager
    def queued(self) -> Iterator[None]:
        if not self._waiting:
            self._since = self._clock.now()
        self._waiting += 1
        try:
            yield
        finally:
            self._waiting -= 1
            if not self._waiting:
                self._waited_s += self._clock.now() - self._since


# The answer a task's calls are for: when it started (the clock's seconds), so each of its calls queues by the
# answer's age, and the deadline meter of the call under way. Set for a task by `answer_context`.
_ANSWER_SINCE: contextvars.ContextVar[float | None] = contextvars.ContextVar("answer_since", default=None)
_QUEUE_WAIT: contextvars.ContextVar[QueueWait | None] = contextvars.ContextVar("queue_wait", default=None)


def answer_context(*, since: float | None = None, wait: QueueWait | None = None) -> contextvars.Context:
    """A copy of the current context for a task whose budget calls are one answer's (`since`: when it started)
    or one deadline-bound call's (`wait`: what its queueing is counted in); what is not given is inherited."""
    context = contextvars.copy_context()
    if since is not None:
        context.run(_ANSWER_SINCE.set, since)
    if wait is not None:
        context.run(_QUEUE_WAIT.set, wait)
    return context


@contextmanager
def queued_from(since: float) -> Iterator[None]:
    """Budget calls made inside queue from `since` rather than from their answer's start."""
    token = _ANSWER_SINCE.set(since)
    try:
        yield
    finally:
        _ANSWER_SINCE.reset(token)


@dataclass(eq=False, kw_only=True)
class _Waiter:
    future: asyncio.Future[None]
    key: Hashable
    shows_text: bool
    since: float  # its answer's start (or its own request): its place within a priority
    level: Priority  # the queue it is in now; a promoted waiter's old entry is skipped


@dataclass(order=True, kw_only=True)
class _Entry:
    rank_at: float
    seq: int
    waiter: _Waiter = field(compare=False)


class RateBudget:
    """Token bucket for one rate limit (a Slack method per workspace, a Discord channel, ...).

    `acquire` returns at once while tokens last and no one is queued; otherwise waiters are served
    as tokens refill: every waiting FINAL first, then FIRST, each by its answer's age (the oldest answer
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
    overloads close together measure the limit (see MEASURE_WITHIN_S).
    """

    def __init__(
        self, *, capacity: float, refill_per_s: float, clock: Clock, parent: RateBudget | None = None,
        learns: bool = False, learned_floor_per_s: float = LEARNED_RATE_FLOOR_PER_S, known_limit: bool = True,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least one call")
        if refill_per_s <= 0:
            raise ValueError("refill_per_s must be positive")
        self._capacity = float(capacity)
        self._refill_per_s = float(refill_per_s)
        self._clock = clock
        self._parent = parent
        self._learns = learns
        self._initial = (self._capacity, self._refill_per_s)
        # The last moment it was drawn on or paused until: from then on it refills towards full.
        self._busy_until = clock.now()
        self._learned_floor_per_s = min(learned_floor_per_s, self._refill_per_s)
        self._last_limited_at = float("-inf")
        self._slowed_until = float("-inf")
        self._granted_at: deque[float] = deque()  # grant times in the last LEARNING_WINDOW_S, when learning
        self._refused_at: deque[float] = deque()  # 429 times in the last LEARNING_WINDOW_S, when learning
        self._most_accepted = 0  # the most calls accepted (granted, less 429s) in one LEARNING_WINDOW_S lately
        self._most_accepted_at = float("-inf")
        self._known_limit = known_limit
        self._overload_at = float("-inf")  # the first 429 of the last overload
        self._granted_since_overload = 0
        self._measures: deque[tuple[float, float]] = deque()  # (when, calls/s) two overloads measured lately
        self._tokens = self._capacity
        self._updated_at = clock.now()
        self._paused_until = float("-inf")
        self._finals: list[_Entry] = []
        self._firsts: list[_Entry] = []
        self._seq = itertools.count()
        self._intermediates: OrderedDict[Hashable, deque[_Waiter]] = OrderedDict()
        self._dispatcher: asyncio.Task[None] | None = None

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
        since = _ANSWER_SINCE.get()
        return self._clock.now() if since is None else since

    @property
    def refill_per_s(self) -> float:
        return self._refill_per_s

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
        if not self._has_waiters() and self._take(self._reserve_for(priority)):
            return
        waiter = _Waiter(
            future=asyncio.get_running_loop().create_future(),
            key=requester_key,
            shows_text=shows_text,
            since=since,
            level=priority,
        )
        if priority is Priority.FINAL or (promote is not None and promote.is_set()):
            self._queue_final(waiter)
        elif priority is Priority.FIRST:
            heapq.heappush(self._firsts, _Entry(rank_at=since, seq=next(self._seq), waiter=waiter))
        else:
            self._intermediates.setdefault(requester_key, deque()).append(waiter)
        if waiter.level is Priority.INTERMEDIATE:
            self._ensure_dispatcher()
        else:
            # The dispatcher may be asleep until an intermediate's reserve refills: this one needs less.
            self._restart_dispatcher()
        meter = _QUEUE_WAIT.get()
        try:
            with meter.queued() if meter is not None else _nothing():
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
        if self._waiters_ahead(priority, shows_text=shows_text) or not self._take(self._reserve_for(priority)):
            return False
        if self._parent is not None and not self._parent.try_acquire(priority, shows_text=shows_text):
            self._release_own()
            return False
        return True

    def _waiters_ahead(self, priority: Priority | None, *, shows_text: bool) -> bool:
        if priority is None or priority is Priority.INTERMEDIATE:
            return self._has_waiters()
        self._drop_abandoned()
        if self._finals:
            return True
        # A final over shown text lets first texts go first (see SHOWN_TEXT_FINAL_DEFER_S).
        return bool(self._firsts) and (priority is Priority.FIRST or shows_text)

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
        if self._has_waiters():
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
        resume_at = self._clock.now() + max(0.0, retry_after_s)
        if self._learns:
            self._refused_at.append(self._clock.now())
            self._slow_down(resume_at)
        self._busy_until = max(self._busy_until, resume_at)
        if resume_at <= self._paused_until:
            return
        self._paused_until = resume_at
        # The server's window is full: refill restarts when the pause ends, with the one call
        # the server promised.
        self._tokens = 1.0
        self._updated_at = resume_at

    async def _wait_or_promote(self, waiter: _Waiter, promote: asyncio.Event) -> None:
        promoted = asyncio.ensure_future(promote.wait())
        try:
            await asyncio.wait({waiter.future, promoted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            promoted.cancel()
        if not waiter.future.done():
            self._queue_final(waiter)
            self._restart_dispatcher()

    def _queue_final(self, waiter: _Waiter) -> None:
        waiter.level = Priority.FINAL
        rank_at = waiter.since + (SHOWN_TEXT_FINAL_DEFER_S if waiter.shows_text else 0.0)
        heapq.heappush(self._finals, _Entry(rank_at=rank_at, seq=next(self._seq), waiter=waiter))

    def idle(self, *, for_s: float = 0.0) -> bool:
        """Nobody waits and nobody drew on it since it would be full again (plus `for_s`): a new budget
        would be in the same state."""
        now = self._clock.now()
        return not self._has_waiters() and now - self._busy_until > self._capacity / self._refill_per_s + for_s

    def _slow_down(self, resume_at: float) -> None:
        now = self._clock.now()
        self._last_limited_at = now
        if now < self._slowed_until:
            return  # calls sent before the last slow-down, answered by the same overload
        self._slowed_until = resume_at
        self._forget_grants_before(now - LEARNING_WINDOW_S)
        refused_share = len(self._refused_at) / max(1, len(self._granted_at))
        if now - self._most_accepted_at > LEARNING_MEMORY_S or refused_share >= LIMIT_WENT_DOWN_REFUSED_SHARE:
            # Old, or belied by a minute in which the platform refused a good share of the calls: the
            # limit went down, and what was accepted before is no floor any more.
            self._most_accepted, self._most_accepted_at = self._accepted_in_window(), now
            self._measures.clear()
        rate = max(self._learned_floor_per_s, self._slower_rate(now))
        factor = min(1.0, rate / self._refill_per_s)
        self._refill_per_s *= factor
        self._capacity = max(1.0, self._capacity * factor)
        self._tokens = min(self._tokens, self._capacity)

    def _slower_rate(self, now: float) -> float:
        """The rate after an overload (before the floor)."""
        slower = self._refill_per_s * LEARNED_RATE_UNDER_ACCEPTED
        if self._known_limit:
            # A told number is trusted: a 429 is likelier noise (requests that arrived bunched, a busy
            # platform) than a wrong number, so a tenth slower, and back after a quiet stretch.
            return slower
        halved = self._refill_per_s * LEARNED_RATE_DECREASE
        measured = self._measure(now)
        if measured is not None and measured >= halved:
            # The platform accepted that much, so the limit is at least the most measured lately (429s of
            # other causes, a busy platform, close together only measure too little). Still a little
            # slower than now: a limit that really went down is found in a few overloads. A measure
            # under half the rate is too few calls to tell (or the pause took most of the time).
            self._measures.append((now, measured))
            return max(halved, min(slower, self._ceiling(now) * LEARNED_RATE_UNDER_MEASURED))
        # The limit is at least the most the platform accepted in a minute lately: halving never goes far
        # below that, so 429s of other causes cannot talk the rate down to a trickle.
        return max(halved, self._most_accepted / LEARNING_WINDOW_S * LEARNED_RATE_UNDER_ACCEPTED)

    def _measure(self, now: float) -> float | None:
        """The rate two overloads close together show (this one the second), else None."""
        since, granted = now - self._overload_at, self._granted_since_overload
        self._overload_at, self._granted_since_overload = now, 0
        if not 0 < since <= MEASURE_WITHIN_S:
            return None
        return max(0, granted - 1) / since  # the call this 429 answered was granted but not accepted

    def _ceiling(self, now: float) -> float:
        """The most measured in the last MEASURE_MEMORY_S (no bound when nothing was)."""
        while self._measures and self._measures[0][0] < now - MEASURE_MEMORY_S:
            self._measures.popleft()
        return max((rate for _, rate in self._measures), default=float("inf"))

    def _forget_grants_before(self, moment: float) -> None:
        for times in (self._granted_at, self._refused_at):
            while times and times[0] < moment:
                times.popleft()

    def _accepted_in_window(self) -> int:
        return max(0, len(self._granted_at) - len(self._refused_at))

    def _recover(self, now: float) -> None:
        """A quiet stretch since the last 429: the learnt rate grows back, never past where it started."""
        capacity, refill = self._initial
        refill = min(refill, self._ceiling(now))
        if self._refill_per_s >= refill or now - self._last_limited_at < LEARNED_RATE_RECOVER_AFTER_S:
            return
        self._last_limited_at = now  # the next step needs another quiet stretch
        self._refill_per_s = min(refill, self._refill_per_s * LEARNED_RATE_RECOVERY)
        self._capacity = min(capacity, max(1.0, self._capacity * LEARNED_RATE_RECOVERY))

    def _refill(self) -> None:
        now = self._clock.now()
        if self._learns:
            self._recover(now)
        if now > self._updated_at:
            elapsed = now - self._updated_at
            self._tokens = min(self._capacity, self._tokens + elapsed * self._refill_per_s)
            self._updated_at = now

    def _take(self, reserve: float = 0.0) -> bool:
        """One token, if `reserve` more stay in the bucket after it."""
        self._refill()
        if self._clock.now() < self._paused_until or self._tokens < 1 + reserve - TOKEN_EPSILON:
            return False
        self._tokens = max(0.0, self._tokens - 1)
        if self._learns:
            now = self._clock.now()
            self._granted_since_overload += 1
            self._granted_at.append(now)
            self._forget_grants_before(now - LEARNING_WINDOW_S)
            accepted = self._accepted_in_window()
            if accepted >= self._most_accepted:
                self._most_accepted, self._most_accepted_at = accepted, now
        return True

    def _drop_abandoned(self) -> None:
        while self._finals and self._finals[0].waiter.future.done():
            heapq.heappop(self._finals)
        while self._firsts and _gone(self._firsts[0].waiter, Priority.FIRST):
            heapq.heappop(self._firsts)
        for key in list(self._intermediates):
            queue = self._intermediates[key]
            while queue and _gone(queue[0], Priority.INTERMEDIATE):
                queue.popleft()
            if not queue:
                del self._intermediates[key]

    def _has_waiters(self) -> bool:
        self._drop_abandoned()
        return bool(self._finals or self._firsts or self._intermediates)

    def _next_level(self) -> Priority:
        """The queue the next grant goes to (the waiters are not dropped yet: call after _has_waiters)."""
        if self._finals and not self._final_yields_to_first_text():
            return Priority.FINAL
        return Priority.FIRST if self._firsts else Priority.INTERMEDIATE

    def _next_waiter(self) -> _Waiter:
        level = self._next_level()
        if level is Priority.FINAL:
            return heapq.heappop(self._finals).waiter
        if level is Priority.FIRST:
            return heapq.heappop(self._firsts).waiter
        key = next(iter(self._intermediates))
        queue = self._intermediates[key]
        waiter = queue.popleft()
        if queue:
            self._intermediates.move_to_end(key)
        else:
            del self._intermediates[key]
        return waiter

    def _final_yields_to_first_text(self) -> bool:
        """A waiting first text of an older answer goes before a final: a final over the placeholder is its own
        answer's first text (the oldest answer's first), and a final over text already shown lets first texts go
        ahead within its deferral (those of answers that started before its own did, plus SHOWN_TEXT_FINAL_DEFER_S:
        its reader already sees most of the answer; the others still see only the placeholder)."""
        return bool(self._firsts) and self._firsts[0].rank_at < self._finals[0].rank_at

    def _ensure_dispatcher(self) -> None:
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch())

    async def _dispatch(self) -> None:
        # One task per budget hands out tokens while anyone waits, then ends.
        while self._has_waiters():
            reserve = self._reserve_for(self._next_level())
            if self._take(reserve):
                self._next_waiter().future.set_result(None)
                continue
            now = self._clock.now()
            if now < self._paused_until:
                await self._clock.sleep(self._paused_until - now)
            else:
                await self._clock.sleep(max(0.0, 1 + reserve - self._tokens) / self._refill_per_s)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _gone(waiter: _Waiter, level: Priority) -> bool:
    """Done, or promoted out of the queue at `level`."""
    return waiter.future.done() or waiter.level is not level


K = TypeVar("K", bound=Hashable)


class BudgetMap(Generic[K]):
    """Budgets by key (a channel, a workspace), made on first use. One that went idle is dropped, so a
    bot in many channels does not keep one per channel forever; one still held (an answer streaming
    there) is found again through a weak reference, so a key never has two budgets at once."""

    def __init__(self, make: Callable[[K], RateBudget], *, keep_idle_s: float = 0.0) -> None:
        self._make = make
        self._keep_idle_s = keep_idle_s
        self._kept: dict[K, RateBudget] = {}
        self._held: weakref.WeakValueDictionary[K, RateBudget] = weakref.WeakValueDictionary()

    def __call__(self, key: K) -> RateBudget:
        self._kept = {k: budget for k, budget in self._kept.items() if k == key or not budget.idle(for_s=self._keep_idle_s)}
        budget = self._kept.get(key) or self._held.get(key)
        if budget is None:
            budget = self._held[key] = self._make(key)
        self._kept[key] = budget
        return budget

    def __len__(self) -> int:
        """Budgets kept (one dropped while still held is not counted)."""
        return len(self._kept)

