"""A sharded client's shards identify as the bot's max_concurrency allows: one per bucket (shard id modulo
max_concurrency) every 5 s, so the shards of different buckets start at once."""

from __future__ import annotations

import asyncio

from adapters.discord.shards import IDENTIFY_WINDOW_S, IdentifyPacing


class SteppedClock:
    """Time moves only by the sleeps asked of it; each sleep is recorded."""

    def __init__(self) -> None:
        self.t = 100.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.slept.append(max(0.0, seconds))
        self.t += max(0.0, seconds)


async def test_shards_of_different_buckets_identify_at_once_and_a_bucket_once_a_window() -> None:
    clock = SteppedClock()
    pacing = IdentifyPacing(2, clock)
    for shard in (0, 1, 2, 3):
        await pacing.wait(shard)
    # 0 and 1 at once; 2 and 3 (buckets 0 and 1 again) one window later, together.
    assert clock.slept == [0.0, 0.0, IDENTIFY_WINDOW_S, 0.0]


async def test_with_max_concurrency_one_each_identify_waits_a_window_as_discord_py_does() -> None:
    clock = SteppedClock()
    pacing = IdentifyPacing(1, clock)
    for shard in (0, 1, 2):
        await pacing.wait(shard)
    assert clock.slept == [0.0, IDENTIFY_WINDOW_S, IDENTIFY_WINDOW_S]
    clock.t += 60.0  # long after: a shard identifying again (a new session) need not wait
    await pacing.wait(1)
    assert clock.slept[-1] == 0.0


async def test_two_identifies_of_one_bucket_at_once_take_turns() -> None:
    clock = SteppedClock()
    pacing = IdentifyPacing(1, clock)
    await asyncio.gather(pacing.wait(0), pacing.wait(1))
    assert sorted(clock.slept) == [0.0, IDENTIFY_WINDOW_S]
