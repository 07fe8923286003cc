"""Learning a limit the platform does not publish from its 429s: how far an overload slows a budget down, and how it grows back.

A 429 slows a told limit by a tenth (LEARNED_RATE_UNDER_ACCEPTED); a guessed one it halves, but not below a little
under the most the platform accepted in a minute lately (Slack's limits are per minute). Neither goes below the
floor. 429s within the pause of the one that slowed it down are the same overload and count once. After
LEARNED_RATE_RECOVER_AFTER_S without one, the rate grows back by a quarter each time, up to where it started.

An unknown limit (`known_limit=False`) is measured by two overloads close together: the platform's bucket was empty
at both, so the calls it accepted in between, over the time between them, are its rate. The platform accepted that
much, so the limit is at least the most measured in MEASURE_MEMORY_S (429s of other causes only measure less): a
measured overload slows down to a little under that rather than by half, but a tenth at least (a limit that went
down is found in a few overloads), and the rate grows back quickly only up to it, so a limit that drew 429s is not
probed every few seconds.
"""

from __future__ import annotations

from collections import deque

LEARNING_WINDOW_S = 60.0
LEARNED_RATE_FLOOR_PER_S = 1.0 / LEARNING_WINDOW_S
LEARNED_RATE_DECREASE = 0.5
LEARNED_RATE_UNDER_ACCEPTED = 0.9
# How long the most calls accepted in a minute is remembered as a floor (limits can change).
LEARNING_MEMORY_S = 10 * LEARNING_WINDOW_S
# ... unless the platform refused this share of the calls in the last minute: then the limit went down.
LIMIT_WENT_DOWN_REFUSED_SHARE = 0.25
LEARNED_RATE_RECOVERY = 1.25
LEARNED_RATE_RECOVER_AFTER_S = 10.0
MEASURE_WITHIN_S = LEARNING_WINDOW_S
MEASURE_MEMORY_S = 3 * LEARNING_WINDOW_S
LEARNED_RATE_UNDER_MEASURED = 0.95


class RateLearner:
    """What one learning budget knows of its platform's limit: the calls it granted and the 429s it got lately,
    the most accepted in a minute, and what two overloads close together measured."""

    def __init__(self, *, capacity: float, refill_per_s: float, floor_per_s: float, known_limit: bool) -> None:
        self._initial = (capacity, refill_per_s)
        self._floor_per_s = min(floor_per_s, refill_per_s)
        self._known_limit = known_limit
        self._last_limited_at = float("-inf")
        self._slowed_until = float("-inf")
        self._granted_at: deque[float] = deque()  # grant times in the last LEARNING_WINDOW_S
        self._refused_at: deque[float] = deque()  # 429 times in the last LEARNING_WINDOW_S
        self._most_accepted = 0  # the most calls accepted (granted, less 429s) in one LEARNING_WINDOW_S lately
        self._most_accepted_at = float("-inf")
        self._overload_at = float("-inf")  # the first 429 of the last overload
        self._granted_since_overload = 0
        self._measures: deque[tuple[float, float]] = deque()  # (when, calls/s) two overloads measured lately

    @property
    def measures(self) -> int:
        """How many measures it keeps (one more after an overload that measured the limit)."""
        return len(self._measures)

    @property
    def latest_measure(self) -> float | None:
        return self._measures[-1][1] if self._measures else None

    def adopt(self, now: float, per_s: float) -> None:
        """A measure made elsewhere (another process, in this learner's units): a ceiling as if measured here."""
        self._measures.append((now, per_s))

    def rescale(self, factor: float) -> None:
        """Its budget now takes `factor` times the share it took: every rate and count it knows follows."""
        capacity, refill = self._initial
        self._initial = (max(1.0, capacity * factor), refill * factor)
        self._floor_per_s *= factor
        self._most_accepted = int(self._most_accepted * factor)
        self._measures = deque((when, rate * factor) for when, rate in self._measures)

    def granted(self, now: float) -> None:
        """A call was granted at `now`."""
        self._granted_since_overload += 1
        self._granted_at.append(now)
        self._forget_grants_before(now - LEARNING_WINDOW_S)
        accepted = self._accepted_in_window()
        if accepted >= self._most_accepted:
            self._most_accepted, self._most_accepted_at = accepted, now

    def slower(self, now: float, resume_at: float, refill_per_s: float) -> float | None:
        """A 429 at `now`, paused until `resume_at`: the rate to go on at, or None when it is the overload that
        already slowed the budget down (calls sent before the last slow-down, answered by the same overload)."""
        self._refused_at.append(now)
        self._last_limited_at = now
        if now < self._slowed_until:
            return None
        self._slowed_until = resume_at
        self._forget_grants_before(now - LEARNING_WINDOW_S)
        refused_share = len(self._refused_at) / max(1, len(self._granted_at))
        if now - self._most_accepted_at > LEARNING_MEMORY_S or refused_share >= LIMIT_WENT_DOWN_REFUSED_SHARE:
            # Old, or belied by a minute in which the platform refused a good share of the calls: the
            # limit went down, and what was accepted before is no floor any more.
            self._most_accepted, self._most_accepted_at = self._accepted_in_window(), now
            self._measures.clear()
        return max(self._floor_per_s, self._slower_rate(now, refill_per_s))

    def recovered(self, now: float, capacity: float, refill_per_s: float) -> tuple[float, float] | None:
        """After a quiet stretch since the last 429: the grown-back (capacity, refill), never past where it
        started; None when it stays as it is."""
        start_capacity, start_refill = self._initial
        ceiling = min(start_refill, self._ceiling(now))
        if refill_per_s >= ceiling or now - self._last_limited_at < LEARNED_RATE_RECOVER_AFTER_S:
            return None
        self._last_limited_at = now  # the next step needs another quiet stretch
        return (
            min(start_capacity, max(1.0, capacity * LEARNED_RATE_RECOVERY)),
            min(ceiling, refill_per_s * LEARNED_RATE_RECOVERY),
        )

    def _slower_rate(self, now: float, refill_per_s: float) -> float:
        """The rate after an overload (before the floor)."""
        slower = refill_per_s * LEARNED_RATE_UNDER_ACCEPTED
        if self._known_limit:
            # A told number is trusted: a 429 is likelier noise (requests that arrived bunched, a busy
            # platform) than a wrong number, so a tenth slower, and back after a quiet stretch.
            return slower
        halved = refill_per_s * LEARNED_RATE_DECREASE
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
