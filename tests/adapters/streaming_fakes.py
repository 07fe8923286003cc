"""Virtual-time clock and in-memory message transport for testing the streamer (and adapters)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

# Guards against a scenario that never ends (a streamer retrying forever would trip it).
MAX_CLOCK_ADVANCES = 100_000


class FakeClock:
    """Virtual time: `run` advances it to the next sleeper's deadline whenever every task waits.

    Deterministic: no wall-clock timers; ties are woken in the order they went to sleep.
    """

    def __init__(self) -> None:
        self._now = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        wake = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + max(0.0, seconds), next(self._order), wake))
        await wake

    async def run(self, scenario: Awaitable[T], *, max_virtual_s: float = 3600.0) -> T:
        """Runs `scenario` to its end, moving virtual time on whenever all tasks are parked."""
        loop = asyncio.get_running_loop()
        main = asyncio.ensure_future(scenario)
        for _ in range(MAX_CLOCK_ADVANCES):
            # Let every runnable callback run until the loop has nothing ready but us.
            idle_rounds = 0
            while idle_rounds < 2 and not main.done():
                await asyncio.sleep(0)
                ready = loop._ready  # type: ignore[attr-defined]
                idle_rounds = idle_rounds + 1 if not ready else 0
            if main.done():
                return main.result()
            while self._sleepers and self._sleepers[0][2].done():
                heapq.heappop(self._sleepers)
            if not self._sleepers:
                main.cancel()
                raise AssertionError("deadlock: every task waits on something other than the clock")
            deadline = self._sleepers[0][0]
            if deadline > max_virtual_s:
                main.cancel()
                raise AssertionError(f"scenario still running at {deadline:g} virtual seconds")
            self._now = max(self._now, deadline)
            while self._sleepers and self._sleepers[0][0] <= self._now:
                _, _, wake = heapq.heappop(self._sleepers)
                if not wake.done():
                    wake.set_result(None)
        main.cancel()
        raise AssertionError("clock advanced too many times")


@dataclass(frozen=True, kw_only=True)
class Call:
    at: float
    op: str  # "post" or "edit"
    message_id: str
    text: str


@dataclass(kw_only=True)
class MemoryTransport:
    """Records posts and edits; can be told to fail the next calls or to hang until released."""

    clock: FakeClock
    latency_s: float = 0.05
    calls: list[Call] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    faults: deque[BaseException] = field(default_factory=deque)
    gate: asyncio.Event | None = None  # when set to an unset Event, calls wait for it
    attempt_times: list[float] = field(default_factory=list)

    async def post(self, text: str, *, key: str | None = None) -> str:
        await self._arrive()
        message_id = f"m{len(self.texts) + 1}"
        self.texts[message_id] = text
        self.calls.append(Call(at=self.clock.now(), op="post", message_id=message_id, text=text))
        return message_id

    async def edit(self, message_id: str, text: str) -> None:
        await self._arrive()
        assert message_id in self.texts, f"edit of unknown message {message_id}"
        self.texts[message_id] = text
        self.calls.append(Call(at=self.clock.now(), op="edit", message_id=message_id, text=text))

    async def _arrive(self) -> None:
        self.attempt_times.append(self.clock.now())
        if self.gate is not None:
            await self.gate.wait()
        await self.clock.sleep(self.latency_s)
        if self.faults:
            raise self.faults.popleft()

    def edits_of(self, message_id: str) -> list[Call]:
        return [call for call in self.calls if call.message_id == message_id]

    def final_texts(self) -> list[str]:
        """Every message's current text, in the order the messages were posted."""
        return list(self.texts.values())
