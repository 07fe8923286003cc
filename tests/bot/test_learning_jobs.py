"""The learning jobs' runner: a run that outlasts its interval is never doubled, a failure is logged and tried again,
and the shutdown cancels the run under way (bot/jobs.py OneAtATime)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bot.jobs import OneAtATime


async def test_a_tick_while_a_run_is_under_way_starts_no_second_one() -> None:
    started = 0
    release = asyncio.Event()

    async def backfill() -> None:
        nonlocal started
        started += 1
        await release.wait()

    job = OneAtATime(backfill, what="learn from the chosen channels")
    await job.tick()
    await asyncio.sleep(0)
    for _ in range(5):
        await job.tick()  # returns at once: apscheduler never sees an instance still running
        await asyncio.sleep(0)
    assert started == 1 and job.running
    release.set()
    while job.running:
        await asyncio.sleep(0)
    await job.tick()
    while job.running:
        await asyncio.sleep(0)
    assert started == 2
    await job.stop()


async def test_a_failed_run_is_logged_and_the_next_tick_tries_again(caplog: pytest.LogCaptureFixture) -> None:
    runs: list[str] = []

    async def flaky() -> None:
        runs.append("run")
        if len(runs) == 1:
            raise ConnectionError("the database is gone for a moment")

    job = OneAtATime(flaky, what="learn from the chosen channels")
    with caplog.at_level(logging.ERROR):
        await job.tick()
        while job.running:
            await asyncio.sleep(0)
    assert any("could not learn from the chosen channels; the next check tries again" in r.getMessage()
               for r in caplog.records)
    await job.tick()
    while job.running:
        await asyncio.sleep(0)
    assert runs == ["run", "run"]
    await job.stop()


async def test_stop_cancels_the_run_under_way_and_no_tick_starts_another() -> None:
    cancelled = asyncio.Event()
    started = asyncio.Event()

    async def paced_backfill() -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # a page waiting its turn on the platform's read budget
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job = OneAtATime(paced_backfill, what="learn from the chosen channels")
    await job.tick()
    await started.wait()
    await job.stop()
    assert cancelled.is_set() and not job.running
    await job.tick()
    assert not job.running
