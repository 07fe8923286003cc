"""Rate budgets by key (a channel, a workspace), made on first use and dropped once idle; the shares they may follow."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from .rate_budget import RateBudget

K = TypeVar("K", bound=Hashable)


class Shares(Protocol):
    """This process's share of each platform budget among the live processes, and the limits they learnt
    (core/store/shares.py's BudgetShares): read from memory, changed on the heartbeat's beat."""

    def serve(self, scope: str) -> float: ...

    def weigh(self, scope: str, weight: float) -> None: ...

    def follow(self, changed: Callable[[], None]) -> None: ...

    def learned(self, scope: str) -> float | None: ...

    def learn(self, scope: str, per_s: float) -> None: ...


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

    def items(self) -> list[tuple[K, RateBudget]]:
        """Every budget in use: kept, or still held by an answer."""
        found = dict(self._held.items())
        found.update(self._kept)
        return list(found.items())

    def __len__(self) -> int:
        """Budgets kept (one dropped while still held is not counted)."""
        return len(self._kept)
