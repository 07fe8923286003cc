"""Every scheduled job of a running process is a coroutine function, so apscheduler awaits it."""

from __future__ import annotations

import asyncio
import inspect
import logging
from pathlib import Path

import pytest

from bot.runtime import Runtime
from tests.emulators.openai_server import OpenAIEmulator
from tests.support.engine import test_settings as settings_for


async def test_every_job_is_awaited_by_the_scheduler(database_url: str, openai_emulator: OpenAIEmulator, tmp_path: Path) -> None:
    settings = settings_for(openai_emulator.base_url, database_url=database_url, data_dir=tmp_path, http_port=0)
    runtime = Runtime(settings)
    try:
        await runtime.start()
        jobs = {job.id: job.func for job in runtime.scheduler.get_jobs()}
        assert {"expire-approvals", "revert-stuck-runs", "sweep-reminders", "heartbeat", "sync-sources"} <= set(jobs)
        # A plain function returning a coroutine would be called and its coroutine never awaited.
        assert all(inspect.iscoroutinefunction(func) for func in jobs.values()), jobs
    finally:
        await runtime.stop()


async def test_a_job_whose_wait_the_shutdown_cancels_ends_with_a_line_not_a_traceback(
    database_url: str, openai_emulator: OpenAIEmulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(openai_emulator.base_url, database_url=database_url, data_dir=tmp_path, http_port=0)
    runtime = Runtime(settings)
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def paced_delivery() -> None:
        await waiter  # a delivery waiting behind a rate budget that the shutdown closes

    job = runtime._job(paced_delivery, "maintain-test")
    running = asyncio.create_task(job())
    await asyncio.sleep(0)
    runtime._stopping = True
    waiter.cancel()
    with caplog.at_level(logging.INFO):
        await running  # ends quietly: apscheduler would log a CancelledError escaping as a failed job
    assert any("maintain-test stopped" in r.getMessage() for r in caplog.records)

    # Not stopping: a cancellation is not ours to swallow.
    runtime._stopping = False
    other: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def waits() -> None:
        await other

    task = asyncio.create_task(runtime._job(waits, "other")())
    await asyncio.sleep(0)
    other.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
