"""Known fake secrets given to real relaybot processes never show up in anything they print, at any log level."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.emulators.discord import DiscordEmulator, RateLimitConfig
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator
from tests.support.processes import answer_once_on_each_platform, free_port, healthy

REPO = Path(__file__).resolve().parents[2]
ANSWER = "An answer from a process holding secrets."

SLACK_SIGNING_SECRET = "slack-signing-SECRET-6b1f"
DISCORD_TOKEN = "discord-token-SECRET-91ac"
LLM_API_KEY = "sk-llm-key-SECRET-4d2e"
DATABASE_PASSWORD = "db-password-SECRET-77c3"
DATABASE_SSL_PASSWORD = "db-sslpassword-SECRET-0e5a"


@pytest.fixture
async def slack() -> AsyncIterator[SlackEmulator]:
    async with SlackEmulator(time_scale=0.05, signing_secret=SLACK_SIGNING_SECRET) as emulator:
        yield emulator


@pytest.fixture
async def discord() -> AsyncIterator[DiscordEmulator]:
    async with DiscordEmulator(time_scale=0.1, rate_limit=RateLimitConfig(), bot_token=DISCORD_TOKEN) as emulator:
        yield emulator


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIEmulator]:
    # The emulator refuses any other key, so the process must really have used this one.
    async with OpenAIEmulator(api_key=LLM_API_KEY) as emulator:
        emulator.script_fn(lambda body: Text(ANSWER))
        yield emulator


def _env(database_url: str, llm: OpenAIEmulator, slack: SlackEmulator, discord: DiscordEmulator, **values: str) -> dict[str, str]:
    # The test database trusts local connections, so it accepts (and ignores) any password.
    assert "postgres:@" in database_url
    secret_url = database_url.replace("postgres:@", f"postgres:{DATABASE_PASSWORD}@") + f"&sslpassword={DATABASE_SSL_PASSWORD}"
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE", "TMPDIR")}
    env.update(
        PYTHONPATH=str(REPO),
        DATABASE_URL=secret_url,
        LLM_BASE_URL=llm.base_url,
        LLM_API_KEY=LLM_API_KEY,
        EMBEDDING_PROVIDER="none",
        SLACK_BOT_TOKEN=slack.bot_token,
        SLACK_SIGNING_SECRET=SLACK_SIGNING_SECRET,
        SLACK_API_URL=slack.api_url,
        DISCORD_TOKEN=DISCORD_TOKEN,
        DISCORD_API_BASE=discord.api_base,
        DISCORD_GATEWAY_URL=discord.gateway_url,
        SHUTDOWN_GRACE_S="2",
    )
    env.update(values)
    return env


def _secrets(slack: SlackEmulator) -> tuple[str, ...]:
    return (slack.bot_token, SLACK_SIGNING_SECRET, DISCORD_TOKEN, LLM_API_KEY, DATABASE_PASSWORD, DATABASE_SSL_PASSWORD)


def _assert_no_secret(output: str, slack: SlackEmulator) -> None:
    leaked = [secret for secret in _secrets(slack) if secret in output]
    assert not leaked, f"{leaked} printed in:\n{output[-3000:]}"
    assert "Traceback" not in output, output[-3000:]


async def _relaybot(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    return process.returncode or 0, output.decode()


async def test_run_at_debug_level_prints_no_secret(
    database_url: str, llm: OpenAIEmulator, slack: SlackEmulator, discord: DiscordEmulator, tmp_path: Path
) -> None:
    guild = discord.add_guild("team")
    channel_id = discord.add_channel(guild, "general")
    ada = discord.add_user("ada")
    port = free_port()
    env = _env(database_url, llm, slack, discord, HTTP_PORT=str(port))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "--verbose", "run", env=env, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    # Read while it runs: debug output would fill the pipe and block the process.
    reading = asyncio.create_task(process.stdout.read())
    try:
        ready = False
        for _ in range(300):
            if await healthy(port) and discord.live_session_count >= 1:
                ready = True
                break
            await asyncio.sleep(0.1)
        if not ready:
            process.kill()
            pytest.fail(f"relaybot run did not come up:\n{(await reading).decode()[-3000:]}")

        await answer_once_on_each_platform(
            port, slack, discord, channel="C0SECRETS", discord_channel=channel_id, asker=ada,
            question="what is the plan?", answer=ANSWER,
        )

        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), timeout=60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        log = (await reading).decode()
    assert process.returncode == 0, log[-3000:]
    assert " DEBUG " in log  # the most talkative level was really on
    assert "database: Postgres at postgresql://***@/" in log and "sslpassword=***" in log
    _assert_no_secret(log, slack)


async def test_doctor_and_migrate_print_no_secret(
    database_url: str, llm: OpenAIEmulator, slack: SlackEmulator, discord: DiscordEmulator, tmp_path: Path
) -> None:
    env = _env(database_url, llm, slack, discord)
    malformed = {**env, "DATABASE_URL": env["DATABASE_URL"].replace("postgresql://", "postgresql+psycopg://", 1)}
    (doctor_code, doctor), (migrate_code, migrate), (bad_doctor_code, bad_doctor), (bad_migrate_code, bad_migrate) = (
        await asyncio.gather(
            _relaybot("--verbose", "doctor", env=env, cwd=tmp_path),
            _relaybot("--verbose", "migrate", env=env, cwd=tmp_path),
            _relaybot("doctor", env=malformed, cwd=tmp_path),
            _relaybot("migrate", env=malformed, cwd=tmp_path),
        )
    )
    assert doctor_code == 0, doctor
    lines = dict(line.split(": ", 1) for line in doctor.splitlines() if line.split(":", 1)[0] in ("database", "llm", "slack", "discord"))
    assert all(line.startswith("ok — ") for line in lines.values()), doctor
    assert migrate_code == 0 and "Postgres at postgresql://***@/" in migrate, migrate
    for code, output in ((bad_doctor_code, bad_doctor), (bad_migrate_code, bad_migrate)):
        assert code == 2 and output.count("\n") == 1, output
        assert output.startswith("relaybot: The setting DATABASE_URL is invalid ("), output
    for output in (doctor, migrate, bad_doctor, bad_migrate):
        _assert_no_secret(output, slack)
