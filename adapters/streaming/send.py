"""One-off platform calls outside a stream (approval messages, sources, notices), paced and retried."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

from adapters.streaming.fair_queue import Priority
from adapters.streaming.rate_budget import RateBudget
from adapters.streaming.clock import Clock
from adapters.streaming.transport import RateLimited, TransientSendError
from core import metrics, observe

log = logging.getLogger(__name__)

T = TypeVar("T")

SEND_ATTEMPTS = 6
SEND_BACKOFF_S = 0.5


def _unchanged(error: BaseException) -> BaseException:
    return error


async def send_paced(
    call: Callable[[], Awaitable[T]],
    *,
    budget: RateBudget,
    clock: Clock,
    translate: Callable[[BaseException], BaseException] = _unchanged,
    key: Hashable = None,
    attempts: int = SEND_ATTEMPTS,
    priority: Priority = Priority.FINAL,
    look_up: Callable[[], Awaitable[T | None]] | None = None,
) -> T:
    """Take a token per attempt (FINAL priority unless told: a note one person sees can wait behind the
    answers); retry 429s (pausing the budget) and transient errors.

    `translate` maps a platform's exceptions to RateLimited / TransientSendError; anything else,
    and the last failure, is raised.

    `look_up` makes a call that is not idempotent (a post) safe to repeat: after a failure whose outcome was
    not seen (a transient error: the platform may have done the work), it is asked first, and what it finds
    is returned instead of sending the call again. A 429 did nothing, so it needs no look-up.

    Every attempt queues at the first one's place: a call asked again after a 429 or a failure is not sent
    to the back of its budget's queue.
    """
    since = budget.place()
    for attempt in range(1, attempts + 1):
        with metrics.waiting_for_budget(observe.current_platform()):
            await budget.acquire(priority, key, since=since)
        try:
            return await call()
        except Exception as raw:
            error = translate(raw)
            if isinstance(error, RateLimited):
                budget.penalize(error.retry_after_s, wide=error.wide)
            elif isinstance(error, TransientSendError):
                await clock.sleep(SEND_BACKOFF_S * attempt)
                if look_up is not None:
                    found = await look_up()
                    if found is not None:
                        return found
            else:
                raise
            if attempt == attempts:
                # The translated signal, so a caller can tell "later" (a 429) from a permanent failure.
                raise error from raw
            log.info("platform call failed (attempt %d), retrying: %s", attempt, error)
    raise AssertionError("unreachable")
