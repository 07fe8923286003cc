"""The loop-lag monitor: a stall of the event loop is measured in the lag histogram and named once, with its run and stack."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from prometheus_client import REGISTRY

from core import observe
from core.loop_watch import LoopWatch

LAG = "relaybot_event_loop_lag_seconds"


def lag_samples() -> tuple[float, float]:
    """Beats observed in all, and beats observed later than 0.25 s."""
    count = REGISTRY.get_sample_value(f"{LAG}_count") or 0.0
    within = REGISTRY.get_sample_value(f"{LAG}_bucket", {"le": "0.25"}) or 0.0
    return count, count - within


def hold_the_loop_like_a_runaway_parser() -> None:
    # Blocking on purpose: the stall under test.
    time.sleep(0.4)


async def test_a_400_ms_stall_in_a_run_is_logged_once_with_its_run_id_and_stack_and_measured(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = LoopWatch()
    watch.start()
    try:
        await asyncio.sleep(0.2)  # a few normal beats first
        _, late_before = lag_samples()

        async def a_run() -> None:
            with observe.run_scope(run_id="run-that-stalls", platform="test"):
                await asyncio.sleep(0)
                hold_the_loop_like_a_runaway_parser()

        with caplog.at_level(logging.WARNING, logger="core.loop_watch"):
            await asyncio.create_task(a_run(), name="stalling-run")
            await asyncio.sleep(0.3)  # the beat after the stall is observed
        count_after, late_after = lag_samples()
    finally:
        await watch.stop()

    warnings = [record.getMessage() for record in caplog.records if "stalled" in record.getMessage()]
    naming = [message for message in warnings if "run-that-stalls" in message]
    assert len(naming) == 1, warnings
    assert "hold_the_loop_like_a_runaway_parser" in naming[0]
    assert "stalling-run" in naming[0]
    assert late_after - late_before >= 1
    assert count_after > 0


async def test_a_stall_outside_any_run_is_named_without_a_run(caplog: pytest.LogCaptureFixture) -> None:
    watch = LoopWatch()
    watch.start()
    try:
        await asyncio.sleep(0.1)
        with caplog.at_level(logging.WARNING, logger="core.loop_watch"):
            hold_the_loop_like_a_runaway_parser()
            await asyncio.sleep(0.1)
    finally:
        await watch.stop()
    warnings = [record.getMessage() for record in caplog.records if "stalled" in record.getMessage()]
    assert len(warnings) == 1 and "(run (none))" in warnings[0]
    assert "hold_the_loop_like_a_runaway_parser" in warnings[0]


async def test_stop_ends_the_watchdog_thread_and_gives_the_loop_its_task_factory_back() -> None:
    loop = asyncio.get_running_loop()
    before = loop.get_task_factory()
    watch = LoopWatch()
    watch.start()
    thread = watch._thread
    assert thread is not None and thread.is_alive()
    await watch.stop()
    assert not thread.is_alive()
    assert loop.get_task_factory() is before


async def test_a_stall_inside_a_garbage_collection_says_so(caplog: pytest.LogCaptureFixture) -> None:
    import gc

    def slow_collection(phase: str, info: dict[str, object]) -> None:
        if phase == "start":
            time.sleep(0.4)  # a collection walking a big heap, as seen in the fuzz suite

    watch = LoopWatch()
    watch.start()
    gc.callbacks.append(slow_collection)  # after the watch's, so the collection is already known to be running
    try:
        await asyncio.sleep(0.2)
        with caplog.at_level(logging.WARNING, logger="core.loop_watch"):
            gc.collect(2)
            await asyncio.sleep(0.3)
    finally:
        gc.callbacks.remove(slow_collection)
        await watch.stop()
    warnings = [record.getMessage() for record in caplog.records if "stalled" in record.getMessage()]
    assert len(warnings) == 1, warnings
    assert "garbage collection of generation 2 is running" in warnings[0]
