"""`relaybot run` as a plain process, driven end to end by the Slack, Discord and OpenAI emulators."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import pytest

from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.emulators.slack import SlackEmulator, app_mention_event
from tests.e2e.slack_harness import ALICE, eventually
from tests.support.observe import record_reported_usage
from tests.support.processes import answer_once_on_each_platform, free_port, healthy

REPO = Path(__file__).resolve().parents[2]
ANSWER = "Hello from a real relaybot process."


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
    port = free_port()
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
            if await healthy(port) and dc.live_session_count >= 1:
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


METRICS_TOKEN = "metrics-token-SECRET-3c9d"


async def _get(port: int, path: str, **headers: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}{path}", headers=headers) as response:
            return response.status, await response.text()


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_json_logs_metrics_readiness_and_usage_of_a_running_process(
    database_url: str,
    openai_emulator: OpenAIEmulator,
    slack_emulator: SlackEmulator,
    discord_emulator: DiscordEmulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reported = record_reported_usage(monkeypatch)
    dc = discord_emulator
    guild = dc.add_guild("team")
    channel_id = dc.add_channel(guild, "general")
    ada = dc.add_user("ada")
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE")}
    env.update(
        PYTHONPATH=str(REPO), DATABASE_URL=database_url, LLM_BASE_URL=openai_emulator.base_url, LLM_API_KEY="sk-test",
        EMBEDDING_PROVIDER="none", SLACK_BOT_TOKEN=slack_emulator.bot_token,
        SLACK_SIGNING_SECRET=slack_emulator.signing_secret, SLACK_API_URL=slack_emulator.api_url,
        DISCORD_TOKEN=dc.token, DISCORD_API_BASE=dc.api_base, DISCORD_GATEWAY_URL=dc.gateway_url,
        HTTP_PORT=str(port), SHUTDOWN_GRACE_S="2", LOG_FORMAT="json", METRICS_TOKEN=METRICS_TOKEN,
    )
    # Each question: a calculator call first, then the answer (so each run has a tool audit line too).
    openai_emulator.script_fn(
        lambda body: Text(ANSWER) if any(m.get("role") == "tool" for m in body["messages"])
        else ToolCalls([Call("calculator", '{"expression": "6*7"}')])
    )
    started = datetime.now(timezone.utc)  # the module's database holds the other test's turns too
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", env=env, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    reading = asyncio.create_task(process.stdout.read())
    try:
        for _ in range(300):
            if await healthy(port) and dc.live_session_count >= 1 and (await _get(port, "/readyz"))[0] == 200:
                break
            await asyncio.sleep(0.1)
        assert await _get(port, "/readyz") == (200, '{"status": "ready"}')

        await answer_once_on_each_platform(
            port, slack_emulator, dc, channel="C0METRICS", discord_channel=channel_id, asker=ada,
            question="hello?", answer=ANSWER,
        )

        assert (await _get(port, "/metrics"))[0] == 401
        status, body = await _get(port, "/metrics", Authorization=f"Bearer {METRICS_TOKEN}")
        assert status == 200
        samples = _samples(body)
        for platform in ("slack", "discord"):
            labels = {("platform", platform), ("model", "gpt-4o-mini")}
            assert samples[("relaybot_answers_total", frozenset({("platform", platform), ("outcome", "answered")}))] == 1
            assert samples[("relaybot_model_first_token_seconds_count", frozenset(labels))] == 1
            assert samples[("relaybot_model_total_seconds_count", frozenset(labels))] == 1
        tokens = {
            direction: sum(value for (name, labels), value in samples.items()
                           if name == "relaybot_tokens_total" and ("direction", direction) in labels)
            for direction in ("in", "out")
        }
        assert tokens == {"in": reported.prompt_tokens, "out": reported.completion_tokens}
        assert ("relaybot_db_pool_in_use", frozenset()) in samples

        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), timeout=60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        output = (await reading).decode()
    assert process.returncode == 0, output[-3000:]

    lines = [line for line in output.splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line of the session is one JSON object
    answers = [record for record in records if record.get("event") == "answer"]
    assert sorted(record["platform"] for record in answers) == ["discord", "slack"]
    for answer in answers:
        assert answer["outcome"] == "answered" and answer["run_id"] and answer["conversation"].startswith(answer["platform"])
        assert answer["tokens_in"] > 0 and answer["tokens_out"] > 0
        assert 0 <= answer["first_token_s"] <= answer["total_s"] and answer["tools"] == ["calculator"]
        # Not only the answer line: the run's other lines (its tool's audit line here) carry its id and conversation.
        [audit] = [record for record in records if record.get("audit") == "tool_run" and record["run_id"] == answer["run_id"]]
        assert audit["tool"] == "calculator" and audit["outcome"] == "ok"
        assert audit["conversation"] == answer["conversation"]
    assert METRICS_TOKEN not in output and "Traceback" not in output

    usage = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "usage", "--by", "channel", "--format", "json", "--since", started.isoformat(),
        env=env, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(usage.communicate(), timeout=60)
    assert usage.returncode == 0, err.decode()
    rows = json.loads(out)
    assert sum(row["tokens_in"] for row in rows) == reported.prompt_tokens
    assert sum(row["tokens_out"] for row in rows) == reported.completion_tokens
    assert {row["platform"] for row in rows} == {"slack", "discord"}
