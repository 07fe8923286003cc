"""Who a rate budget serves next: finals, then first texts, each by its answer's age, then intermediate edits round-robin by answer."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import IntEnum

# A final whose message already shows answer text lets finals that are an answer's first text
# (its message still shows the placeholder) go first, but only those requested up to this many
# seconds after it, so it never starves.
SHOWN_TEXT_FINAL_DEFER_S = 60.0


class Priority(IntEnum):
    """Who goes first when tokens are short: finals, then first texts, then intermediate edits."""

    INTERMEDIATE = 0
    FIRST = 1
    FINAL = 2


@dataclass(eq=False, kw_only=True)
class Waiter:
    future: asyncio.Future[None]
    key: Hashable
    shows_text: bool
    since: float  # its answer's start (or its own request): its place within a priority
    level: Priority  # the queue it is in now; a promoted waiter's old entry is skipped


@dataclass(order=True, kw_only=True)
class _Entry:
    rank_at: float
    seq: int
    waiter: Waiter = field(compare=False)


class FairQueue:
    """The waiters of one budget: every FINAL first, then FIRST, each by its answer's age (`since`; a FIRST of an
    answer older than the oldest FINAL's goes before it, both being first texts), then INTERMEDIATE round-robin
    across requester keys, so no answer starves. A final that replaces text already shown ranks
    `SHOWN_TEXT_FINAL_DEFER_S` later, so the first texts of answers up to that much younger go ahead of it.
    A waiter that is done (granted, cancelled) or promoted out of a queue is dropped from it lazily."""

    def __init__(self) -> None:
        self._finals: list[_Entry] = []
        self._firsts: list[_Entry] = []
        self._seq = itertools.count()
        self._intermediates: OrderedDict[Hashable, deque[Waiter]] = OrderedDict()

    def add(self, waiter: Waiter) -> None:
        """Queues `waiter` at its level."""
        if waiter.level is Priority.FINAL:
            self.promote(waiter)
        elif waiter.level is Priority.FIRST:
            heapq.heappush(self._firsts, _Entry(rank_at=waiter.since, seq=next(self._seq), waiter=waiter))
        else:
            self._intermediates.setdefault(waiter.key, deque()).append(waiter)

    def promote(self, waiter: Waiter) -> None:
        """Queues `waiter` as a FINAL (its answer ended while it waited); its old entry is skipped."""
        waiter.level = Priority.FINAL
        rank_at = waiter.since + (SHOWN_TEXT_FINAL_DEFER_S if waiter.shows_text else 0.0)
        heapq.heappush(self._finals, _Entry(rank_at=rank_at, seq=next(self._seq), waiter=waiter))

    def has_waiters(self) -> bool:
        self._drop_abandoned()
        return bool(self._finals or self._firsts or self._intermediates)

    def waiters_ahead(self, priority: Priority | None, *, shows_text: bool) -> bool:
        """Whether a waiter would go before a request at `priority` (None: any waiter at all)."""
        if priority is None or priority is Priority.INTERMEDIATE:
            return self.has_waiters()
        self._drop_abandoned()
        if self._finals:
            return True
        # A final over shown text lets first texts go first (see SHOWN_TEXT_FINAL_DEFER_S).
        return bool(self._firsts) and (priority is Priority.FIRST or shows_text)

    def next_level(self) -> Priority:
        """The queue the next grant goes to (the waiters are not dropped yet: call after has_waiters)."""
        if self._finals and not self._final_yields_to_first_text():
            return Priority.FINAL
        return Priority.FIRST if self._firsts else Priority.INTERMEDIATE

    def pop_next(self) -> Waiter:
        """The waiter the next grant goes to, out of its queue (call after has_waiters)."""
        level = self.next_level()
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


def _gone(waiter: Waiter, level: Priority) -> bool:
    """Done, or promoted out of the queue at `level`."""
    return waiter.future.done() or waiter.level is not level
