"""A platform adapter's maintain job (Discord's shard claims and takeovers, repair, kept finals) runs on the process's
beat, HEARTBEAT_INTERVAL_S, as its heartbeat does: a shorter beat looks again sooner."""

from __future__ import annotations

from pathlib import Path

from bot.runtime import Runtime
from tests.emulators.discord import DiscordEmulator, point_discord_py_at
from tests.emulators.openai_server import OpenAIEmulator
from tests.support.engine import test_settings as settings_for


async def test_the_maintain_job_runs_on_the_heartbeat_interval(
    database_url: str, openai_emulator: OpenAIEmulator, discord_emulator: DiscordEmulator, tmp_path: Path,
) -> None:
    dc = discord_emulator
    dc.add_channel(dc.add_guild("guild"), "general")
    settings = settings_for(
        openai_emulator.base_url, database_url=database_url, data_dir=tmp_path, http_port=0, heartbeat_interval_s=2.0,
        discord_token=dc.token, discord_api_base=dc.api_base, discord_gateway_url=dc.gateway_url,
    )
    runtime = Runtime(settings)
    with point_discord_py_at(dc):
        try:
            await runtime.start()
            intervals = {job.id: job.trigger.interval.total_seconds() for job in runtime.scheduler.get_jobs()}
        finally:
            await runtime.stop()
    assert intervals["heartbeat"] == 2.0
    assert intervals["maintain-discord"] == 2.0, intervals
