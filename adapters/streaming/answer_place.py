"""Which answer a task's budget calls are for: their place in every budget queue (the answer's age) and the deadline meter of the call under way."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .clock import Clock

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


def answer_since() -> float | None:
    """When the answer this task's calls are for started, if the task is one answer's."""
    return _ANSWER_SINCE.get()


@contextmanager
def counted_as_queued() -> Iterator[None]:
    """Time spent inside counts as queueing for the deadline-bound call under way, if any."""
    meter = _QUEUE_WAIT.get()
    if meter is None:
        yield
        return
    with meter.queued():
        yield
