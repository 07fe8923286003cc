"""Benchmark: 1, 2 and 4 `relaybot run` processes on one Postgres (issue 26); per N, a Slack and a Discord burst.

Each N gets a fresh database on the bench's embedded Postgres and fresh emulators (Slack with a workspace-wide
chat.postMessage cap, told to the bot; Discord with its per-route and 50-a-second global limits, the guilds spread
over N shards) and starts N plain `python -m bot run` processes with the README's settings (Slack in HTTP mode,
each process on its own port, the bench spreading events over them as a load balancer would; Discord with
DISCORD_SHARD_COUNT=N, shards assigned by lease). Time is not scaled: every process's CPU counts as on a real
deployment. The machine has 2 cores: this measures what coordination costs, not how CPU scales.

The Slack burst is over two workspaces installed as bench/reliability.py's scenario (k) installs them (stored installs,
no SLACK_BOT_TOKEN: every process in multi-workspace mode), 100 answers each, alternating, each workspace with its own
cap told. Each process answers once in each workspace before the burst, so that it serves both and the beats have
counted its shares (a process that never answered in a workspace holds none of it yet).

Printed per N: answers complete (target 100 %), 429s (target 0), p95 of the first answer text against the bound
the platform's limits allow for that position (target ≤ 1.2 for every N), the most database connections the
processes held at once, and CPU-seconds per answer.

Discord's bound is its documented rate, "50 requests per second" across the bot: the 95th answer's 190 calls need
189 / 50 s after the first. The emulator counts in fixed one-second windows that open at a burst's first call, so a
sender who knew where each window starts could put 50 calls in each at once and finish in 3 s: that bound is printed
too, but it is not what Discord promises. Discord does not say where its windows start, and calls sent at once
reach it spread out by the sender's load: a burst of 48 sent at once by a loaded process reached the emulator across
two of its windows (15 global 429s in tests/e2e's bot-wide-limit test). Only a sender that counted each call in the
window until its response came back could go at the windows' pace safely, and discord.py makes calls of its own.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m bench.scale [--counts 1,2,4] [--platforms slack,discord]
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

from adapters.discord.transport import GLOBAL_MARGIN, DiscordBudgets
from adapters.streaming.clock import MonotonicClock
from core.store.db import EmbeddedPostgres
from tests.emulators.discord import GLOBAL_LIMIT_PER_S, DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator, Team, app_mention_event, workspace_post_cap

from bench.reliability_support.teams import TwoTeams
from bench.scale_support import ConnectionSampler, Fleet, fresh_database
from bench.slack_stream_support import Probe, Reading, percentile, target, wait_until

COUNTS = (1, 2, 4)
PLATFORMS = ("slack", "discord")
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


async def slack_burst(slack: SlackEmulator, teams: TwoTeams, fleet: Fleet, answers: Answers, sampler: ConnectionSampler,
                      n: int) -> Row:
    read = Reading(slack)

    async def ask(probe: Probe, team: Team, url: str) -> None:
        text = f"<@{team.bot_user_id}> scale question #{probe.tag}"
        asker = f"{USER[:-1]}{team.team_id[-1]}"
        probe.question_ts = slack.add_user_message(probe.channel, text, asker, team_id=team.team_id)
        probe.sent_at = time.monotonic()
        event = app_mention_event(text=text, user=asker, channel=probe.channel, ts=probe.question_ts,
                                  team_id=team.team_id)
        await slack.deliver_event_until_taken(url, event, team_id=team.team_id)

    # One answer from each process in each workspace first: each then serves both workspaces and has its shares once
    # the beats have counted it (a process that never answered in a workspace holds none of it yet: its first answers
    # there would wait for a beat).
    lones = []
    for t, team in enumerate(teams.teams):
        for k, member in enumerate(fleet.members):
            lone = answers.prepare(f"{teams.team_channel(team, 9000 + n * 10 + k)}", f"slack-{n}-lone-{t}-{k}")
            await ask(lone, team, member.events_url)
            await wait_until(lambda: read.delivered(lone), WAIT_LIMIT_S)  # noqa: B023
            lones.append(lone)
    lone = lones[0]
    overhead_s = (read.first_text_at(lone) or math.nan) - lone.model_first_token_at
    cap = slack.limits["chat.postMessage/workspace"]
    # The budgets refill and the shares settle: every process counted by the others (two beats and a half).
    await asyncio.sleep(max(cap.burst / (cap.calls / cap.window_s), SETTLE_BEATS * HEARTBEAT_S))

    limited_before, cpu_before, calls_before = dict(slack.count_429), fleet.cpu_seconds(), len(slack.calls)
    # The answers alternate between the workspaces, and each workspace's between the processes.
    asked = [(answers.prepare(teams.team_channel(teams.teams[i % 2], n * 1000 + i), f"slack-{n}-{i}"), teams.teams[i % 2])
             for i in range(SLACK_ANSWERS)]
    urls = [member.events_url for member in fleet.members]
    await asyncio.gather(*(ask(probe, team, urls[(i // 2) % len(urls)]) for i, (probe, team) in enumerate(asked)))
    probes = [probe for probe, _ in asked]
    await wait_until(lambda: all(read.delivered(p) for p in probes), WAIT_LIMIT_S)
    cpu_s = fleet.cpu_seconds() - cpu_before
    firsts = [(read.first_text_at(p) or math.inf) - p.sent_at - p.chunk_delay_s for p in probes]
    by_method = {m: c - limited_before.get(m, 0) for m, c in slack.count_429.items() if c - limited_before.get(m, 0)}
    if by_method:
        print(f"  slack N={n}: 429s by method {by_method}")
    wrong = teams.calls_with_another_teams_token()
    # A first text that waited past STREAM_PLACEHOLDER_AFTER_S went as an edit of the placeholder: on chat.update's
    # budget (50 a minute a workspace), not chat.postMessage's cap the bound counts.
    for team in teams.teams:
        mine = [(first, probe) for first, (probe, t) in zip(firsts, asked) if t is team]
        edited = [probe for _, probe in mine
                  if not any("Answer for" in (m.posted_text or "") for m in read.bot_messages(probe))]
        by_edit = len(edited)
        model_after = percentile([probe.model_started_at - probe.sent_at for probe in edited], 50) if edited else 0.0
        updates = sum(1 for c in slack.calls[calls_before:] if c.method == "chat.update" and c.team_id == team.team_id)
        print(f"  slack N={n} {team.team_id}: p95 first text {percentile([f for f, _ in mine], 95):.2f} s; "
              f"{by_edit} of {len(mine)} first texts went as an edit of the placeholder (their model asked {model_after:.2f} s "
              f"after the question, median; {updates} chat.update calls)")
    print(f"  slack N={n}: {len(slack.calls) - calls_before} calls in the burst over {len(teams.teams)} workspaces, "
          f"{len(wrong)} with another team's token" + (f" (first: {wrong[0]})" if wrong else ""))
    # Each workspace has its own cap: the 95th percentile of both is the 95th percentile of each one's answers.
    k = math.ceil(0.95 * SLACK_ANSWERS / len(teams.teams))
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
    # Two bounds for the k-th answer's first text, which needs k × its calls. Discord documents a rate, "50 requests
    # per second": sent at that rate (the first at once), the c-th call goes (c - 1) / 50 s after the first — the
    # bound. The emulator counts in fixed one-second windows that start at a burst's first call: a sender who knew
    # where they start could put 50 calls in each at once, the c-th in the (c - 1) // 50-th window — printed too, but
    # no sender can know where Discord's windows start, nor when a call sent at once reaches it (see the docstring).
    total_calls = k * calls_to_first
    bound_s = overhead_s + (total_calls - 1) / GLOBAL_LIMIT_PER_S
    window_bound_s = overhead_s + (total_calls - 1) // GLOBAL_LIMIT_PER_S
    own = DiscordBudgets(calls_per_window=4, window_s=5.0, clock=MonotonicClock(), global_calls=GLOBAL_LIMIT_PER_S)
    assert own.global_budget is not None
    own_bound_s = overhead_s + max(0.0, total_calls - own.global_budget.capacity) / own.global_budget.refill_per_s
    print(f"  discord N={n}: a lone answer made {calls_to_first} calls up to its first text, {overhead_s:.2f} s; every "
          f"call since: {routes}; the {k}th first text's bound at Discord's rate is {bound_s:.2f} s, at its fixed "
          f"windows (known in advance) {window_bound_s:.2f} s (ratio {percentile(firsts, 95) / window_bound_s:.2f}), "
          f"at the bot's own bot-wide budget (burst {own.global_budget.capacity:g}, "
          f"{own.global_budget.refill_per_s:g}/s: window-safe, {100 * GLOBAL_MARGIN:g} % under the limit) {own_bound_s:.2f} s")
    # Each process serves its shard's guilds with 1/N of the bot-wide budget: its answers and their slowest first text.
    for shard in range(n):
        mine = [first for i, first in enumerate(firsts) if (i % DISCORD_CHANNELS % DISCORD_GUILDS) % n == shard]
        print(f"  discord N={n} shard {shard}: {len(mine)} answers, slowest first text {max(mine):.2f} s")
    return Row(platform="discord", processes=n, answers=DISCORD_ANSWERS,
               complete=sum(discord_delivered(dc, a, p.answer) for a, _, p in asked),
               limited=dc.count_429 - limited_before, p95_first_s=percentile(firsts, 95), bound_s=bound_s,
               connections=sampler.most, cpu_s=cpu_s / DISCORD_ANSWERS)


def fleet_env(database_url: str, teams: TwoTeams, dc: DiscordEmulator, openai: OpenAIEmulator, n: int) -> dict[str, str]:
    """The README's settings for a process of the fleet (Slack in multi-workspace mode, as scenario (k) runs it)."""
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(
        HF_HUB_OFFLINE="1", DATABASE_URL=database_url, LLM_BASE_URL=openai.base_url, LLM_API_KEY="bench",
        EMBEDDING_PROVIDER="none", LOG_LEVEL="WARNING", HTTP_HOST="127.0.0.1",
        **teams.env(), SLACK_WORKSPACE_POSTS_PER_MINUTE=str(SLACK_POSTS_PER_MINUTE),
        DISCORD_TOKEN=dc.token, DISCORD_API_BASE=dc.api_base, DISCORD_GATEWAY_URL=dc.gateway_url,
        DISCORD_SHARD_COUNT=str(n), HEARTBEAT_INTERVAL_S=str(HEARTBEAT_S),
    )
    return env


async def one_count(admin_url: str, n: int, log_dir: Path, platforms: tuple[str, ...]) -> list[Row]:
    database = f"scale_{n}"
    database_url = await fresh_database(admin_url, database)
    cap = workspace_post_cap(SLACK_POSTS_PER_MINUTE)
    async with SlackEmulator(workspace_post_cap=cap) as slack, DiscordEmulator() as dc, OpenAIEmulator() as openai:
        answers = Answers(openai)
        (log_dir / str(n)).mkdir(parents=True, exist_ok=True)
        teams = TwoTeams(slack, socket_mode=False)  # installed as scenario (k) installs them
        await teams.install(database_url, log_dir / str(n))
        guilds = [dc.add_guild(f"guild {g}", on_shard=(g % n, n)) for g in range(DISCORD_GUILDS)]
        channels = [dc.add_channel(guilds[c % DISCORD_GUILDS], f"c{c}") for c in range(DISCORD_CHANNELS)]
        user = dc.add_user("asker")
        fleet = Fleet(env=fleet_env(database_url, teams, dc, openai, n), log_dir=log_dir / str(n))
        sampler = ConnectionSampler(admin_url, database)
        try:
            # One shard per process, named (a range each, as the map says): claims by lease even out over beats,
            # and a shard that moves mid-burst restarts a client, which is not what this measures.
            await fleet.start(n, own=lambda k: {"DISCORD_SHARD_IDS": str(k)})
            sampler.start()
            rows = []
            if "slack" in platforms:
                rows.append(await slack_burst(slack, teams, fleet, answers, sampler, n))
            if "discord" in platforms:
                rows.append(await discord_burst(dc, channels, user, fleet, answers, sampler, n))
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
    for platform in PLATFORMS:
        mine = [row for row in rows if row.platform == platform]
        if not mine:
            continue
        complete = all(row.complete == row.answers for row in mine)
        print(f"{platform}: answers complete for every N (target 100 %): {target(complete)}")
        print(f"{platform}: 429s for every N (target 0): {target(all(row.limited == 0 for row in mine))}")
        worst = max(mine, key=lambda row: row.ratio)
        print(f"{platform}: p95 first text / bound, worst {worst.ratio:.2f} at N={worst.processes} (target ≤ "
              f"{RATIO_TARGET:g} for every N): {target(worst.ratio <= RATIO_TARGET)}")


async def main(counts: tuple[int, ...], platforms: tuple[str, ...]) -> None:
    log_dir = Path(tempfile.gettempdir()) / f"relaybot-scale-{time.strftime('%Y%m%d-%H%M%S')}"
    print(f"processes' logs: {log_dir}/N/process-K.log; Slack cap {SLACK_POSTS_PER_MINUTE}/min told, "
          f"{SLACK_ANSWERS} answers in {SLACK_ANSWERS} channels of 2 installed workspaces; Discord {DISCORD_ANSWERS} answers in {DISCORD_CHANNELS} "
          f"channels of {DISCORD_GUILDS} guilds over N shards; time unscaled")
    with tempfile.TemporaryDirectory() as data_dir:
        os.chmod(data_dir, 0o755)  # the embedded server runs as its own user when the bench runs as root
        postgres = EmbeddedPostgres(Path(data_dir) / "pgdata")
        admin_url = await postgres.start()
        rows: list[Row] = []
        try:
            for n in counts:
                rows += await one_count(admin_url, n, log_dir, platforms)
        finally:
            await postgres.stop()
    report(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default=",".join(map(str, COUNTS)), help="process counts, comma-separated")
    parser.add_argument("--platforms", default=",".join(PLATFORMS), help="slack, discord or both (default)")
    arguments = parser.parse_args()
    asyncio.run(main(tuple(int(part) for part in arguments.counts.split(",")),
                     tuple(part for part in arguments.platforms.split(",") if part in PLATFORMS)))
