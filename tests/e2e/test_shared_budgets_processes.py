"""Two `relaybot run` processes on one Postgres share a Slack workspace's told chat.postMessage cap (issue 26): together
they never go past it, and when one is killed (SIGKILL) the other takes its share within the stale time plus one beat."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import psycopg
import pytest

from core.store.heartbeats import STALE_AFTER_BEATS
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator, app_mention_event
from tests.e2e.slack_harness import ALICE
from tests.support.processes import free_port, healthy

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]
# The workspace's chat.postMessage cap, a minute, told to both processes (and the emulator's, with its burst).
CAP = 240
EMULATOR_BURST = CAP // 10
# Beats of a second: a process is stale after STALE_AFTER_BEATS of them (the constants' 30 s / 10 s).
BEAT_S = 1.0
STALE_S = STALE_AFTER_BEATS * BEAT_S
# What the beat itself may drift by on a busy machine (apscheduler's interval job, the transaction).
BEAT_JITTER_S = 0.25 * BEAT_S
ANSWER = "Shared answer."
CHANNELS_EACH = 12
BURST_EACH = 36
SCOPE = "slack:{team}"


def _env(database_url: str, openai: OpenAIEmulator, slack: SlackEmulator, port: int) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE")}
    env.update(
        PYTHONPATH=str(REPO), DATABASE_URL=database_url, LLM_BASE_URL=openai.base_url, LLM_API_KEY="sk-test",
        EMBEDDING_PROVIDER="none", SLACK_BOT_TOKEN=slack.bot_token, SLACK_SIGNING_SECRET=slack.signing_secret,
        SLACK_API_URL=slack.api_url, SLACK_WORKSPACE_POSTS_PER_MINUTE=str(CAP), SLACK_NATIVE_STREAMING="off",
        SLACK_ASSISTANT="false", STREAM_PLACEHOLDER_AFTER_S="60", FEEDBACK_BUTTONS="false",
        HEARTBEAT_INTERVAL_S=str(BEAT_S), HTTP_PORT=str(port), SHUTDOWN_GRACE_S="1",
    )
    return env


async def _shares(database_url: str, scope: str) -> dict[str, tuple[float | None, float]]:
    """Each process's published share of `scope` and its stamp (the database's clock, epoch seconds)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT owner, (shares ->> %s)::float, extract(epoch FROM seen_at) FROM process_heartbeats", (scope,)
        )
        return {owner: (share, float(seen)) for owner, share, seen in await cursor.fetchall()}


async def _until(check, *, timeout_s: float, what: str, poll_s: float = 0.05):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(poll_s)
    raise AssertionError(f"{what}: not within {timeout_s} s")


class Asker:
    """Mentions of the bot in its own channels, delivered to one process (a channel is one process's alone, so
    Slack's per-channel limit is never what is counted)."""

    def __init__(self, slack: SlackEmulator, port: int, prefix: str) -> None:
        self.slack, self.url = slack, f"http://127.0.0.1:{port}/slack/events"
        self.channels = [f"C0{prefix}{n:03d}" for n in range(CHANNELS_EACH)]
        self.asked = 0

    async def ask(self, count: int) -> None:
        async def one(n: int) -> None:
            channel = self.channels[n % len(self.channels)]
            text = f"<@{self.slack.bot_user_id}> question {n}"
            ts = self.slack.add_user_message(channel, text, ALICE)
            delivery = await self.slack.deliver_event(
                self.url, app_mention_event(text=text, user=ALICE, channel=channel, ts=ts, team_id=self.slack.team_id)
            )
            assert delivery.status == 200

        await asyncio.gather(*(one(self.asked + n) for n in range(count)))
        self.asked += count

    def answered(self) -> int:
        return sum(1 for channel in self.channels for m in self.slack.messages(channel) if m.text == ANSWER)

    def posts(self, since_s: float = 0.0) -> list[float]:
        return sorted(
            call.at_s for call in self.slack.calls
            if call.method == "chat.postMessage" and call.params.get("channel") in self.channels and call.at_s >= since_s
        )


def _most_in_a_minute(times: list[float]) -> int:
    return max((sum(1 for other in times if at <= other < at + 60.0) for at in times), default=0)


async def test_two_processes_share_a_workspace_cap_and_the_survivor_takes_a_killed_ones_share(
    database_url: str, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    openai_emulator.script_fn(lambda body: Text(ANSWER))
    async with SlackEmulator(workspace_post_cap=CAP) as slack:
        scope = SCOPE.format(team=slack.team_id)
        ports = [free_port(), free_port()]
        processes = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "run", env=_env(database_url, openai_emulator, slack, port), cwd=tmp_path,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )
            for port in ports
        ]
        try:
            async def both_up() -> bool:
                return all([await healthy(port) for port in ports])

            await _until(both_up, timeout_s=60, what="both processes healthy", poll_s=0.2)
            first, second = Asker(slack, ports[0], "A"), Asker(slack, ports[1], "B")
            # One answer each: both serve the workspace, and each counts the other at its next beats.
            await asyncio.gather(first.ask(1), second.ask(1))

            async def halves() -> bool:
                shares = await _shares(database_url, scope)
                return len(shares) == 2 and all(share == 0.5 for share, _ in shares.values())

            await _until(halves, timeout_s=20, what="a half each")

            # Both at once, far more than the cap allows at once: together they never go past it.
            started = time.monotonic()
            await asyncio.gather(first.ask(BURST_EACH), second.ask(BURST_EACH))

            async def all_answered() -> bool:
                return first.answered() == second.answered() == BURST_EACH + 1

            await _until(all_answered, timeout_s=90, what="every answer of the burst", poll_s=0.2)
            assert slack.count_429.get("chat.postMessage", 0) == 0, "the cap refused posts: the two went past it"
            together = sorted(first.posts(started) + second.posts(started))
            assert _most_in_a_minute(together) <= CAP + EMULATOR_BURST

            # Killed: no clean exit, its row stays until it is stale. Its owner names its pid (process_identity).
            processes[0].send_signal(signal.SIGKILL)
            await processes[0].wait()
            shares = await _shares(database_url, scope)
            (dead_owner,) = [owner for owner in shares if f":{processes[0].pid}:" in owner]
            dead_last_seen = shares[dead_owner][1]

            async def taken_over() -> tuple[float, float] | None:
                shares = await _shares(database_url, scope)
                alive = [(share, seen) for owner, (share, seen) in shares.items() if owner != dead_owner]
                return alive[0] if alive and alive[0][0] == 1.0 else None

            _, taken_at = await _until(taken_over, timeout_s=STALE_S + 4 * BEAT_S, what="the survivor's whole share")
            # Counted in the database's clock, from the dead one's last stamp: the first beat after it went stale.
            assert taken_at - dead_last_seen <= STALE_S + BEAT_S + BEAT_JITTER_S

            # The survivor alone now posts at the whole cap, still without a 429: faster than half of it allows.
            resumed = time.monotonic()
            await second.ask(BURST_EACH)

            async def second_answered() -> bool:
                return second.answered() == 2 * BURST_EACH + 1

            await _until(second_answered, timeout_s=90, what="the survivor's burst", poll_s=0.2)
            assert slack.count_429.get("chat.postMessage", 0) == 0
            alone = second.posts(resumed)
            half_burst, half_per_s = (CAP / 10 - 3) / 2, (CAP - (CAP / 10 - 3)) / 60 / 2
            at_half_s = (len(alone) - half_burst) / half_per_s
            assert alone[-1] - alone[0] < 0.75 * at_half_s, (alone[-1] - alone[0], at_half_s)
        finally:
            for process in processes:
                if process.returncode is None:
                    process.send_signal(signal.SIGTERM)
            for process in processes:
                try:
                    await asyncio.wait_for(process.wait(), 30)
                except asyncio.TimeoutError:
                    process.kill()
