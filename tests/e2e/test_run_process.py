"""`relaybot run` as a plain process, driven end to end by the Slack, Discord and OpenAI emulators."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp

from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator, app_mention_event
from tests.e2e.slack_harness import ALICE, eventually

REPO = Path(__file__).resolve().parents[2]
ANSWER = "Hello from a real relaybot process."


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _healthy(port: int) -> bool:
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                return response.status == 200
    except aiohttp.ClientError:
        return False


async def test_run_answers_on_slack_and_discord_then_stops_on_sigterm(
    database_url: str,
    openai_emulator: OpenAIEmulator,
    slack_emulator: SlackEmulator,
    discord_emulator: DiscordEmulator,
    tmp_path: Path,
) -> None:
    dc = discord_emulator
    guild = dc.add_guild("team")
    channel_id = dc.add_channel(guild, "general")
    ada = dc.add_user("ada")
    port = _free_port()
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE")}
    env.update(
        PYTHONPATH=str(REPO),
        DATABASE_URL=database_url,
        LLM_BASE_URL=openai_emulator.base_url,
        LLM_API_KEY="sk-test",
        EMBEDDING_PROVIDER="none",
        SLACK_BOT_TOKEN=slack_emulator.bot_token,
        SLACK_SIGNING_SECRET=slack_emulator.signing_secret,
        SLACK_API_URL=slack_emulator.api_url,
        DISCORD_TOKEN=dc.token,
        DISCORD_API_BASE=dc.api_base,
        DISCORD_GATEWAY_URL=dc.gateway_url,
        HTTP_PORT=str(port),
        SHUTDOWN_GRACE_S="2",
    )
    openai_emulator.script_fn(lambda body: Text(ANSWER))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", env=env, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        ready = False
        for _ in range(300):
            if await _healthy(port) and dc.live_session_count >= 1:
                ready = True
                break
            await asyncio.sleep(0.1)
        assert ready, "relaybot run did not come up"

        # Slack: a signed mention over HTTP mode.
        text = f"<@{slack_emulator.bot_user_id}> hello?"
        ts = slack_emulator.add_user_message("C0PROCESS", text, ALICE)
        delivery = await slack_emulator.deliver_event(
            f"http://127.0.0.1:{port}/slack/events",
            app_mention_event(text=text, user=ALICE, channel="C0PROCESS", ts=ts, team_id=slack_emulator.team_id),
        )
        assert delivery.status == 200
        assert await eventually(lambda: any(m.text == ANSWER for m in slack_emulator.messages("C0PROCESS")))

        # Discord: a mention opens a thread with the answer.
        asked = await dc.send_user_message(channel_id, ada, "hello?", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread", timeout=15)
        await dc.wait_for(lambda: any(m.content == ANSWER for m in dc.messages(thread.id)), what="answer", timeout=15)

        process.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
        assert process.returncode == 0, output.decode()[-3000:]
        log = output.decode()
        assert "database: Postgres at" in log
        assert "Traceback" not in log
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
