"""Full garbage collections wait for a quiet moment (no run active), or their longest interval; young ones go on."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from core.collector import YOUNG_COLLECTIONS_PER_FULL, QuietCollector


class Cycle:
    def __init__(self) -> None:
        self.me = self


def _garbage_cycles(count: int) -> None:
    for _ in range(count):
        Cycle()


class Generations:
    """Counts the collections Python starts, by generation, while in use."""

    def __init__(self) -> None:
        self.started: dict[int, int] = {0: 0, 1: 0, 2: 0}

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started[int(info["generation"])] += 1

    def __enter__(self) -> "Generations":
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


async def _churn_until(condition: Any, *, limit_s: float = 20.0) -> None:
    """Makes cyclic garbage (young collections run) until `condition()` holds or the limit passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not condition() and loop.time() < deadline:
        _garbage_cycles(5_000)
        await asyncio.sleep(0.005)


async def test_while_a_run_is_active_no_full_collection_starts_and_once_quiet_one_does() -> None:
    busy = True
    collector = QuietCollector(lambda: busy, check_s=0.02, max_interval_s=3600)
    thresholds = gc.get_threshold()
    with Generations() as seen:
        collector.start()
        try:
            # Far past Python's own schedule (a full collection every ~10 young ones): none while busy.
            await _churn_until(lambda: seen.started[1] >= 10 * YOUNG_COLLECTIONS_PER_FULL)
            assert seen.started[1] >= 10 * YOUNG_COLLECTIONS_PER_FULL and seen.started[0] > seen.started[1]
            assert seen.started[2] == 0 and collector.full_collections == 0
            busy = False
            await _churn_until(lambda: collector.full_collections > 0)
            assert collector.full_collections >= 1 and seen.started[2] >= 1
        finally:
            await collector.stop()
    assert gc.get_threshold() == thresholds  # Python's own schedule is back


async def test_a_process_never_quiet_still_collects_at_the_longest_interval() -> None:
    collector = QuietCollector(lambda: True, check_s=0.02, max_interval_s=0.2)
    with Generations() as seen:
        collector.start()
        try:
            await _churn_until(lambda: collector.full_collections >= 2)
        finally:
            await collector.stop()
    assert collector.full_collections >= 2 and seen.started[2] >= 2


async def test_a_quiet_process_with_nothing_new_makes_no_full_collection() -> None:
    collector = QuietCollector(lambda: False, check_s=0.01, max_interval_s=3600)
    collector.start()
    try:
        await asyncio.sleep(0.2)  # quiet, and no young collection came: nothing worth a full one
    finally:
        await collector.stop()
    assert collector.full_collections == 0
