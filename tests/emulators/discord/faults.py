"""Optional faults of the emulated Discord: a call that does its work and then answers 5xx, or drops the connection."""

from __future__ import annotations

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


@dataclass
class Faults:
    """Faults armed by a test, taken by the middleware one call at a time."""

    armed: list[AfterWorkFault] = field(default_factory=list)
    fired: int = 0

    def arm(self, route: str, *, kind: FaultKind = "status", status: int = 500, times: int = 1) -> None:
        self.armed.append(AfterWorkFault(route=route, kind=kind, status=status, times=times))

    def take(self, route: str) -> AfterWorkFault | None:
        for fault in self.armed:
            if fault.route == route and fault.times > 0:
                fault.times -= 1
                self.fired += 1
                return fault
        return None

    def clear(self) -> None:
        self.armed.clear()
