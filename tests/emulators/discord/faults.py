"""Optional faults of the emulated Discord: a call that does its work and then answers 5xx, or drops the connection."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

FaultKind = Literal["status", "drop"]


@dataclass(kw_only=True)
class AfterWorkFault:
    """The next `times` calls of a route are carried out, then answered with `status` or a dropped connection."""

    route: str  # the emulator's route name: message_create, thread_from_message, webhook_create …
    kind: FaultKind
    status: int = 500
    times: int = 1


@dataclass(frozen=True, kw_only=True)
class PlannedFault:
    """What a fault plan (Faults.plan) does to one call: "ratelimited" (a route 429 before the work, asking for
    `retry_after_s`), "dropped" (the connection drops before the work), "lost" (done, then the connection drops)
    or "error_after_work" (done, then answered 500)."""

    kind: Literal["ratelimited", "dropped", "lost", "error_after_work"]
    retry_after_s: float = 0.1

    def after_work(self, route: str) -> AfterWorkFault | None:
        if self.kind == "lost":
            return AfterWorkFault(route=route, kind="drop", times=0)
        if self.kind == "error_after_work":
            return AfterWorkFault(route=route, kind="status", times=0)
        return None


@dataclass
class Faults:
    """Faults armed by a test, taken by the middleware one call at a time."""

    armed: list[AfterWorkFault] = field(default_factory=list)
    fired: int = 0
    # A seeded random share of the calls of some routes, besides the armed ones (see arm_randomly).
    random_share: float = 0.0
    random_routes: frozenset[str] = frozenset()
    random_kind: FaultKind = "drop"
    _randoms: dict[str, random.Random] = field(default_factory=dict)
    _seed: int = 0
    # Consulted on every call with its route name and channel id ("" for none): tests/support/fault_schedule.py.
    plan: Callable[[str, str], PlannedFault | None] | None = None

    def arm(self, route: str, *, kind: FaultKind = "status", status: int = 500, times: int = 1) -> None:
        self.armed.append(AfterWorkFault(route=route, kind=kind, status=status, times=times))

    def arm_randomly(self, share: float, *, routes: frozenset[str], kind: FaultKind, seed: int) -> None:
        self.random_share, self.random_routes, self.random_kind = share, routes, kind
        # One seeded sequence per route: its n-th call faults or not whatever the other routes did.
        self._seed, self._randoms = seed, {}

    def take(self, route: str) -> AfterWorkFault | None:
        for fault in self.armed:
            if fault.route == route and fault.times > 0:
                fault.times -= 1
                self.fired += 1
                return fault
        drawn = self._randoms.setdefault(route, random.Random(f"{self._seed}:{route}")) if route in self.random_routes else None
        if self.random_share > 0 and drawn is not None and drawn.random() < self.random_share:
            self.fired += 1
            return AfterWorkFault(route=route, kind=self.random_kind, times=0)
        return None

    def clear(self) -> None:
        self.armed.clear()
        self.random_share = 0.0
