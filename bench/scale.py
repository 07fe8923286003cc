"""Benchmark: 1, 2 and 4 `relaybot run` processes on one Postgres (issue 26); per N, a Slack and a Discord burst.

Each N gets a fresh database on the bench's embedded Postgres and fresh emulators (Slack with a workspace-wide
chat.postMessage cap, told to the bot; Discord with its per-route and 50-a-second global limits, the guilds spread
over N shards) and starts N plain `python -m bot run` processes with the README's settings (Slack in HTTP mode,
each process on its own port, the bench spreading events over them as a load balancer would; Discord with
DISCORD_SHARD_COUNT=N, shards assigned by lease). Time is not scaled: every process's CPU counts as on a real
deployment. The machine has 2 cores: this measures what coordination costs, not how CPU scales.

The Slack burst is in one workspace: one process serves one workspace's token today (several workspaces per process
are the multi-workspace install's, issue 25). Each process answers once before the burst, so that it serves the
workspace and the beats have counted its share (a process that never answered there holds none yet).

Printed per N: answers complete (target 100 %), 429s (target 0), p95 of the first answer text against the bound
the platform's limits allow for that position (target ≤ 1.2 for every N), the most database connections the
processes held at once, and CPU-seconds per answer.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m bench.scale [--counts 1,2,4]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.discord.transport import DiscordBudgets
from adapters.streaming.clock import MonotonicClock
from core.store.db import EmbeddedPostgres
from tests.emulators.discord import GLOBAL_LIMIT_PER_S, DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator, app_mention_event, workspace_post_cap

from bench.scale_support import ConnectionSampler, Fleet, fresh_database
from bench.slack_stream_support import Probe, Reading, percentile, target, wait_until

COUNTS = (1, 2, 4)
SLACK_ANSWERS = 200
SLACK_POSTS_PER_MINUTE = 300  # the emulator's workspace cap, told to the bot (SLACK_WORKSPACE_POSTS_PER_MINUTE)
DISCORD_ANSWERS = 100
DISCORD_CHANNELS = 50
DISCORD_GUILDS = 10
# Short answers written at a hosted model's pace: the first text is what is measured, not long streams.
ANSWER_SENTENCE = "Scaling out shares the platforms' budgets between processes. "
ANSWER_REPEATS = 4
CHUNK_CHARS = 40
CHUNK_DELAY_S = 0.05
WAIT_LIMIT_S = 300.0
RATIO_TARGET = 1.2
HEARTBEAT_S = 10.0  # HEARTBEAT_INTERVAL_S, the default
SETTLE_BEATS = 2.5
CLOCKS_APART_S = 0.02
# What a Discord answer in a channel needs before its first text: its thread, then its message.
NEEDED_ROUTES = frozenset({"thread_from_message", "message_create"})
USER = "U0000SCALE"
PLACEHOLDER_WORDS = ("thinking", "…")


@dataclass
class Row:
    """One platform's burst at one N."""

    platform: str
    processes: int
    answers: int
    complete: int
    limited: int
    p95_first_s: float
    bound_s: float
    connections: int
    cpu_s: float

    @property
    def ratio(self) -> float:
        return self.p95_first_s / self.bound_s


def answer_for(tag: str) -> str:
    return f"Answer for {tag}: " + ANSWER_SENTENCE * ANSWER_REPEATS


def chunks_of(text: str) -> int:
    return math.ceil(len(text) / CHUNK_CHARS)


class Answers:
    """The model's side: each question's tag picks its answer, and when the model started on it."""

    def __init__(self, openai: OpenAIEmulator) -> None:
        self.probes: dict[str, Probe] = {}
        openai.script_fn(self._reply)

    def _reply(self, body: dict[str, Any]) -> Text:
        question = str(body["messages"][-1].get("content", ""))
        probe = self.probes[question.rsplit("#", 1)[-1].strip()]
        probe.model_started_at = time.monotonic()
        return Text(probe.answer, chunk_chars=CHUNK_CHARS, delay_s=CHUNK_DELAY_S)

    def prepare(self, channel: str, tag: str) -> Probe:
        answer = answer_for(tag)
        probe = self.probes[tag] = Probe(channel=channel, tag=tag, answer=answer, chunk_delay_s=CHUNK_DELAY_S,
                                         chunks=chunks_of(answer))
        return probe


async def slack_burst(slack: SlackEmulator, fleet: Fleet, answers: Answers, sampler: ConnectionSampler, n: int) -> Row:
    read = Reading(slack)

    async def ask(probe: Probe, url: str) -> None:
        text = f"<@{slack.bot_user_id}> scale question #{probe.tag}"
        probe.question_ts = slack.add_user_message(probe.channel, text, USER)
        probe.sent_at = time.monotonic()
        event = app_mention_event(text=text, user=USER, channel=probe.channel, ts=probe.question_ts, team_id=slack.team_id)
        await slack.deliver_event_until_taken(url, event)

    # One answer from each process first: each then serves the workspace and has its share once the beats have
    # counted it (a process that never answered there holds none yet: its first answers would wait for a beat).
    lones = [answers.prepare(f"CN{n}LONE{k}", f"slack-{n}-lone-{k}") for k in range(len(fleet.members))]
    for lone, member in zip(lones, fleet.members):
        await ask(lone, member.events_url)
        await wait_until(lambda: read.delivered(lone), WAIT_LIMIT_S)  # noqa: B023
    lone = lones[0]
    overhead_s = (read.first_text_at(lone) or math.nan) - lone.model_first_token_at
    cap = slack.limits["chat.postMessage/workspace"]
    # The budgets refill and the shares settle: every process counted by the others (two beats and a half).
    await asyncio.sleep(max(cap.burst / (cap.calls / cap.window_s), SETTLE_BEATS * HEARTBEAT_S))

    limited_before, cpu_before = dict(slack.count_429), fleet.cpu_seconds()
    probes = [answers.prepare(f"CN{n}S{i:04d}", f"slack-{n}-{i}") for i in range(SLACK_ANSWERS)]
    urls = [member.events_url for member in fleet.members]
    await asyncio.gather(*(ask(probe, urls[i % len(urls)]) for i, probe in enumerate(probes)))
    await wait_until(lambda: all(read.delivered(p) for p in probes), WAIT_LIMIT_S)
    cpu_s = fleet.cpu_seconds() - cpu_before
    firsts = [(read.first_text_at(p) or math.inf) - p.sent_at - p.chunk_delay_s for p in probes]
    by_method = {m: c - limited_before.get(m, 0) for m, c in slack.count_429.items() if c - limited_before.get(m, 0)}
    if by_method:
        print(f"  slack N={n}: 429s by method {by_method}")
    k = math.ceil(0.95 * SLACK_ANSWERS)
    bound_s = overhead_s + max(0, k - cap.burst) / (cap.calls / cap.window_s)
    return Row(platform="slack", processes=n, answers=SLACK_ANSWERS, complete=sum(read.delivered(p) for p in probes),
               limited=sum(slack.count_429.values()) - sum(limited_before.values()), p95_first_s=percentile(firsts, 95),
               bound_s=bound_s, connections=sampler.most, cpu_s=cpu_s / SLACK_ANSWERS)


def discord_first_text_at(dc: DiscordEmulator, asked: int) -> float | None:
    thread = dc.thread_of(asked)
    if thread is None:
        return None
    for message in dc.messages(thread.id):
        if message.author_id == dc.bot_user_id:
            for version in message.versions:
                if version.content and not all(word in version.content for word in PLACEHOLDER_WORDS):
                    return version.at
    return None


def discord_delivered(dc: DiscordEmulator, asked: int, answer: str) -> bool:
    thread = dc.thread_of(asked)
    return thread is not None and any(
        answer in m.content for m in dc.messages(thread.id) if m.author_id == dc.bot_user_id
    )


async def discord_burst(dc: DiscordEmulator, channels: list[int], user: int, fleet: Fleet, answers: Answers,
                        sampler: ConnectionSampler, n: int) -> Row:
    async def ask(channel: int, tag: str) -> tuple[int, float, Probe]:
        probe = answers.prepare(str(channel), tag)
        sent_at = time.time()
        asked = await dc.send_user_message(channel, user, f"scale question #{tag}", mentions_bot=True)
        return asked, sent_at, probe

    # One answer in every guild first: each shard is connected and each process has answered once.
    warm = await asyncio.gather(*(ask(channels[g], f"discord-{n}-warm-{g}") for g in range(DISCORD_GUILDS)))
    await wait_until(lambda: all(discord_delivered(dc, a, p.answer) for a, _, p in warm), WAIT_LIMIT_S)
    requests_before, sent_monotonic = len(dc.request_log), time.monotonic()
    lone_asked, lone_sent, lone = await ask(channels[0], f"discord-{n}-lone")
    await wait_until(lambda: discord_delivered(dc, lone_asked, lone.answer), WAIT_LIMIT_S)
    lone_after_s = (discord_first_text_at(dc, lone_asked) or math.nan) - lone_sent
    # The calls one answer makes up to its first text (the request log keeps monotonic time, messages wall time).
    # (A call logged in the same moment as the text it wrote counts: the two clocks are read a moment apart.)
    # Only the calls an answer needs count (a typing indicator goes only when the budget has a call to spare).
    calls_to_first = sum(r.at <= sent_monotonic + lone_after_s + CLOCKS_APART_S and r.route in NEEDED_ROUTES
                         for r in dc.request_log[requests_before:])
    overhead_s = lone_after_s - CHUNK_DELAY_S
    await asyncio.sleep(5.0)  # the channels' 5 s windows pass

    limited_before, cpu_before = dc.count_429, fleet.cpu_seconds()
    asked = await asyncio.gather(*(ask(channels[i % DISCORD_CHANNELS], f"discord-{n}-{i}")
                                   for i in range(DISCORD_ANSWERS)))
    await wait_until(lambda: all(discord_delivered(dc, a, p.answer) for a, _, p in asked), WAIT_LIMIT_S)
    cpu_s = fleet.cpu_seconds() - cpu_before
    firsts = [(discord_first_text_at(dc, a) or math.inf) - sent - CHUNK_DELAY_S for a, sent, _ in asked]
    k = math.ceil(0.95 * DISCORD_ANSWERS)
    routes: dict[str, int] = {}
    for record in dc.request_log[requests_before:]:
        routes[record.route] = routes.get(record.route, 0) + 1
    # Discord counts its per-bot limit in one-second windows: the k-th answer's first text needs k × its calls, and
    # the c-th call of a burst can go in the (c - 1) // limit-th window at the earliest.
    bound_s = overhead_s + (k * calls_to_first - 1) // GLOBAL_LIMIT_PER_S
    own = DiscordBudgets(calls_per_window=4, window_s=5.0, clock=MonotonicClock(), global_calls=GLOBAL_LIMIT_PER_S)
    assert own.global_budget is not None
    own_bound_s = overhead_s + max(0.0, k * calls_to_first - own.global_budget.capacity) / own.global_budget.refill_per_s
    print(f"  discord N={n}: a lone answer made {calls_to_first} calls up to its first text, {overhead_s:.2f} s; every "
          f"call since: {routes}; the {k}th first text's bound at the bot's own bot-wide budget (burst "
          f"{own.global_budget.capacity:g}, {own.global_budget.refill_per_s:g}/s: window-safe, 10 % under the limit) "
          f"is {own_bound_s:.2f} s")
    return Row(platform="discord", processes=n, answers=DISCORD_ANSWERS,
               complete=sum(discord_delivered(dc, a, p.answer) for a, _, p in asked),
               limited=dc.count_429 - limited_before, p95_first_s=percentile(firsts, 95), bound_s=bound_s,
               connections=sampler.most, cpu_s=cpu_s / DISCORD_ANSWERS)


def fleet_env(database_url: str, slack: SlackEmulator, dc: DiscordEmulator, openai: OpenAIEmulator, n: int) -> dict[str, str]:
    """The README's settings for a process of the fleet."""
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(
        HF_HUB_OFFLINE="1", DATABASE_URL=database_url, LLM_BASE_URL=openai.base_url, LLM_API_KEY="bench",
        EMBEDDING_PROVIDER="none", LOG_LEVEL="WARNING", HTTP_HOST="127.0.0.1",
        SLACK_BOT_TOKEN=slack.bot_token, SLACK_SIGNING_SECRET=slack.signing_secret, SLACK_API_URL=slack.api_url,
        SLACK_WORKSPACE_POSTS_PER_MINUTE=str(SLACK_POSTS_PER_MINUTE),
        DISCORD_TOKEN=dc.token, DISCORD_API_BASE=dc.api_base, DISCORD_GATEWAY_URL=dc.gateway_url,
        DISCORD_SHARD_COUNT=str(n), HEARTBEAT_INTERVAL_S=str(HEARTBEAT_S),
    )
    return env


async def one_count(admin_url: str, n: int, log_dir: Path) -> list[Row]:
    database = f"scale_{n}"
    database_url = await fresh_database(admin_url, database)
    cap = workspace_post_cap(SLACK_POSTS_PER_MINUTE)
    async with SlackEmulator(workspace_post_cap=cap) as slack, DiscordEmulator() as dc, OpenAIEmulator() as openai:
        answers = Answers(openai)
        guilds = [dc.add_guild(f"guild {g}", on_shard=(g % n, n)) for g in range(DISCORD_GUILDS)]
        channels = [dc.add_channel(guilds[c % DISCORD_GUILDS], f"c{c}") for c in range(DISCORD_CHANNELS)]
        user = dc.add_user("asker")
        (log_dir / str(n)).mkdir(parents=True, exist_ok=True)
        fleet = Fleet(env=fleet_env(database_url, slack, dc, openai, n), log_dir=log_dir / str(n))
        sampler = ConnectionSampler(admin_url, database)
        try:
            # One shard per process, named (a range each, as the map says): claims by lease even out over beats,
            # and a shard that moves mid-burst restarts a client, which is not what this measures.
            await fleet.start(n, own=lambda k: {"DISCORD_SHARD_IDS": str(k)})
            sampler.start()
            rows = [await slack_burst(slack, fleet, answers, sampler, n),
                    await discord_burst(dc, channels, user, fleet, answers, sampler, n)]
        finally:
            await sampler.stop()
            await fleet.stop()
        for found in fleet.tracebacks():
            print(found)
    return rows


def report(rows: list[Row]) -> None:
    print("| platform | processes | complete | 429s | p95 first text / bound | db connections (most) | CPU-s per answer |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row.platform} | {row.processes} | {row.complete}/{row.answers} | {row.limited} | "
              f"{row.p95_first_s:.2f} s / {row.bound_s:.2f} s = {row.ratio:.2f} | {row.connections} | {row.cpu_s:.3f} |")
    for platform in ("slack", "discord"):
        mine = [row for row in rows if row.platform == platform]
        complete = all(row.complete == row.answers for row in mine)
        print(f"{platform}: answers complete for every N (target 100 %): {target(complete)}")
        print(f"{platform}: 429s for every N (target 0): {target(all(row.limited == 0 for row in mine))}")
        worst = max(mine, key=lambda row: row.ratio)
        print(f"{platform}: p95 first text / bound, worst {worst.ratio:.2f} at N={worst.processes} (target ≤ "
              f"{RATIO_TARGET:g} for every N): {target(worst.ratio <= RATIO_TARGET)}")


async def main(counts: tuple[int, ...]) -> None:
    log_dir = Path(tempfile.gettempdir()) / f"relaybot-scale-{time.strftime('%Y%m%d-%H%M%S')}"
    print(f"processes' logs: {log_dir}/N/process-K.log; Slack cap {SLACK_POSTS_PER_MINUTE}/min told, "
          f"{SLACK_ANSWERS} answers in {SLACK_ANSWERS} channels; Discord {DISCORD_ANSWERS} answers in {DISCORD_CHANNELS} "
          f"channels of {DISCORD_GUILDS} guilds over N shards; time unscaled")
    with tempfile.TemporaryDirectory() as data_dir:
        os.chmod(data_dir, 0o755)  # the embedded server runs as its own user when the bench runs as root
        postgres = EmbeddedPostgres(Path(data_dir) / "pgdata")
        admin_url = await postgres.start()
        rows: list[Row] = []
        try:
            for n in counts:
                rows += await one_count(admin_url, n, log_dir)
        finally:
            await postgres.stop()
    report(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default=",".join(map(str, COUNTS)), help="process counts, comma-separated")
    arguments = parser.parse_args()
    asyncio.run(main(tuple(int(part) for part in arguments.counts.split(","))))
