"""Time source for the streamer and rate budgets, so tests can run them on virtual time."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds and a sleep that honours them."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


# An answer's age in the budget queues reaches back to when its question was asked, by the platform's own stamp,
# when that is this recent: a burst the process reads in any order keeps who asked first. An older stamp (a
# redelivery) or one from the future (a skewed clock) counts from the moment it is read.
ASKED_AGE_MAX_S = 30.0


def asked_at(clock: Clock, asked_epoch_s: float | None, *, time_scale: float = 1.0) -> float:
    """On `clock` (whose second lasts `time_scale` real seconds), when a question stamped `asked_epoch_s` (epoch
    seconds) was asked, if that is at most ASKED_AGE_MAX_S real seconds ago; else now."""
    now = clock.now()
    if asked_epoch_s is None:
        return now
    age_s = time.time() - asked_epoch_s
    return now - age_s / time_scale if 0.0 <= age_s <= ASKED_AGE_MAX_S else now


class MonotonicClock:
    """The real clock: `time.monotonic` and `asyncio.sleep`."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
