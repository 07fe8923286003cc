"""relaybot_streamer_queue_depth: platform calls waiting for a rate budget, by the platform of the task that waits."""

from __future__ import annotations

import asyncio

from adapters.streaming import RateBudget
from adapters.streaming.send import send_paced
from core import observe
from tests.adapters.streaming_fakes import FakeClock
from tests.support.observe import sample

PLATFORM = "queue-test"


async def test_calls_waiting_for_a_spent_budget_are_counted_until_they_go() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=1, refill_per_s=1.0, clock=clock)
    seen: list[float] = []

    async def call() -> str:
        seen.append(sample("relaybot_streamer_queue_depth", platform=PLATFORM))
        return "sent"

    async def burst() -> list[str]:
        with observe.platform_scope(PLATFORM):
            return await asyncio.gather(*(send_paced(call, budget=budget, clock=clock) for _ in range(3)))

    assert await clock.run(burst()) == ["sent"] * 3
    # Each call sees how many still wait behind it: none yet for the first (the others start after it), then one, then none.
    assert seen == [0.0, 1.0, 0.0]
    assert sample("relaybot_streamer_queue_depth", platform=PLATFORM) == 0.0
