"""Every scheduled job of a running process is a coroutine function, so apscheduler awaits it."""

from __future__ import annotations

import inspect
from pathlib import Path

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
