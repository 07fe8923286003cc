"""Fuzzes a real `relaybot run` process with seeded hostile input on every door, and prints whether it held.

Run: .venv/bin/python -m bench.fuzz [--seed N] [--scale F]  (loopback only; about 5 minutes at scale 1).

One process serves the API, Slack (HTTP mode, signed events) and Discord (the gateway emulator), over a Postgres
of its own, with an API key that has no quota. It gets 5,000 bodies for each API route (raw bytes that break the
parser, and structured bodies whose fields are hostile: client tools whose schemas hold remote, file and recursive
$refs and catastrophic patterns, huge numbers, lone surrogates, deep nesting), 1,000 Slack events and 1,000 Discord
messages with hostile text, and 500 read_url / sql_query calls the scripted model makes with generated arguments.
A canary server listens on 127.0.0.2, outside READ_URL_ALLOWED_NETWORKS (127.0.0.1/32): any request reaching it is
a fetch the guards let through (a URL, a redirect, a schema $ref, an image part).

The bot and its Postgres run at the default CPU priority; this process (the load generator and every emulator)
lowers its own once they are up (nice 10): on this 2-core machine its work would otherwise preempt the bot and be
counted as the bot's event-loop stalls.

Printed, each with its target: 5xx responses, tracebacks in the process log, the worst event-loop stall after the
warm-up (the smallest bucket of relaybot_event_loop_lag_seconds that holds every beat since), peak RSS growth over
the post-warm-up baseline, and canary hits. A seed names the inputs exactly: a failing seed is a regression case.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fuzz_support.gauges import Canary, RssSampler, Site, lag_buckets, worst_bucket  # noqa: E402
from bench.fuzz_support.hostile import TOOL_ARGS_MARKER, Body, Hostile  # noqa: E402
from bench.fuzz_support.model import FuzzModel  # noqa: E402
from bench.reliability_support.discord_side import DiscordSide  # noqa: E402
from bench.reliability_support.postgres import LoopbackPostgres  # noqa: E402
from bench.reliability_support.processes import BotProcess  # noqa: E402
from core.store.api_keys import ApiKeyStore  # noqa: E402
from core.store.db import Database  # noqa: E402
from tests.emulators.discord import DiscordEmulator, GlobalLimitConfig, RateLimitConfig  # noqa: E402
from tests.emulators.openai_server import OpenAIEmulator  # noqa: E402
from tests.emulators.slack import SlackEmulator, app_mention_event, dm_message_event  # noqa: E402

ROUTES = ("/v1/chat/completions", "/api/answer", "/api/answer/stream")
BODIES_PER_ROUTE = 5_000
SLACK_EVENTS = 1_000
DISCORD_EVENTS = 1_000
TOOL_ARGUMENT_SETS = 500
WARM_UP_REQUESTS = 60
CONCURRENCY = 12
LOAD_GENERATOR_NICENESS = 10
REQUEST_TIMEOUT_S = 60.0
SETTLE_LIMIT_S = 60.0
QUIET_S = 5.0
RUN_LIMIT_S = 600.0
SLACK_CHANNELS = 50
DISCORD_CHANNELS = 20
SLACK_TEXT_MAX = 40_000
DISCORD_TEXT_MAX = 2_000
LLM_API_KEY = "sk-fuzz"
SLACK_USER = "U0000FUZZR"
# Targets (issue 21).
TARGET_5XX = 0
TARGET_TRACEBACKS = 0
TARGET_STALL_S = 0.1
TARGET_RSS_MB = 100.0
TARGET_CANARY = 0


class Tally:
    def __init__(self) -> None:
        self.statuses: dict[str, Counter[int]] = {}
        self.failures: Counter[str] = Counter()  # no HTTP answer at all, by where
        self.examples_5xx: list[str] = []

    def record(self, where: str, status: int, sample: bytes = b"") -> None:
        self.statuses.setdefault(where, Counter())[status] += 1
        if status >= 500 and len(self.examples_5xx) < 5:
            self.examples_5xx.append(f"{where} {status} body {sample[:120]!r}")

    def count_5xx(self) -> int:
        return sum(n for counter in self.statuses.values() for status, n in counter.items() if status >= 500)


async def run(seed: int, scale: float) -> int:
    started = time.monotonic()
    rng = random.Random(seed)
    log_dir = Path(tempfile.mkdtemp(prefix="relaybot-fuzz-"))
    pg = LoopbackPostgres()
    await asyncio.to_thread(pg.init)
    await asyncio.to_thread(pg.start)
    canary, site = Canary(), Site()
    llm = OpenAIEmulator(api_key=LLM_API_KEY)
    slack = SlackEmulator(time_scale=1.0)
    discord = DiscordEmulator(time_scale=1.0, rate_limit=RateLimitConfig(), global_limit=GlobalLimitConfig())
    process: BotProcess | None = None
    rss: RssSampler | None = None
    tally = Tally()
    try:
        await canary.start()
        await site.start()
        hostile = Hostile(rng, canary=canary.url, site=site.url)
        tool_sets = [_tool_set(hostile, index) for index in range(_n(TOOL_ARGUMENT_SETS, scale))]
        model = FuzzModel([(name, arguments) for name, arguments, _ in tool_sets])
        await llm.start()
        llm.script_fn(model)
        await slack.start()
        await discord.start()
        discord_side = DiscordSide(discord, channels=DISCORD_CHANNELS)
        database_url = await asyncio.to_thread(pg.create_database)
        sql_dsn = await asyncio.to_thread(_sql_database, pg)
        env = {
            "DATABASE_URL": database_url, "LLM_BASE_URL": llm.base_url, "LLM_API_KEY": LLM_API_KEY,
            "EMBEDDING_PROVIDER": "none", "API_ENABLED": "true", "READ_URL_ALLOWED_NETWORKS": "127.0.0.1/32",
            "SQL_QUERY_DSN": sql_dsn, "SLACK_BOT_TOKEN": slack.bot_token, "SLACK_SIGNING_SECRET": slack.signing_secret,
            "SLACK_API_URL": slack.api_url, **discord_side.env(),
        }
        process = BotProcess("fuzz", env=env, log_dir=log_dir)
        await process.start()
        # The load generator (this process, with every emulator) yields the CPU to the process under test and its
        # database, started before with the default priority: on a 2-core machine its own work would otherwise
        # be counted as the bot's stalls (real load arrives over a network, from other machines).
        os.nice(LOAD_GENERATOR_NICENESS)
        secret = await _api_key(database_url, log_dir)
        base = f"http://127.0.0.1:{process.port}"
        rss = RssSampler(process._process.pid)  # type: ignore[union-attr]
        rss.start()
        limit = asyncio.Semaphore(CONCURRENCY)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)) as http:
            print(f"fuzz seed {seed}, scale {scale:g}; process log {process.log_path}", flush=True)
            # Warm-up: imports, pools and first runs happen here, not in the measured part.
            warm = Body(raw=json.dumps({"question": "what is the status of the deploy?"}).encode())
            await asyncio.gather(*(_post(http, limit, tally, base, "/api/answer", warm, secret, where="warm-up")
                                   for _ in range(WARM_UP_REQUESTS)))
            await _settle(model)
            lag_before = await lag_buckets(process.port)
            rss.mark_baseline()

            phase = time.monotonic()
            for route in ROUTES:
                bodies = [hostile.body(route) for _ in range(_n(BODIES_PER_ROUTE, scale))]
                await asyncio.gather(*(_post(http, limit, tally, base, route, body, secret) for body in bodies))
                print(f"  {route}: {len(bodies)} bodies, {_statuses(tally.statuses.get(route))} "
                      f"({time.monotonic() - phase:.0f} s, {rss.describe()})", flush=True)
            tool_bodies = [Body(raw=json.dumps({"question": f"{TOOL_ARGS_MARKER}{index} please check {url}",
                                                "agent": "agentic"}).encode())
                           for index, (_, _, url) in enumerate(tool_sets)]
            await asyncio.gather(*(_post(http, limit, tally, base, "/api/answer", body, secret, where="tool arguments")
                                   for body in tool_bodies))
            print(f"  tool arguments: {len(tool_bodies)} sets, {_statuses(tally.statuses.get('tool arguments'))} "
                  f"({time.monotonic() - phase:.0f} s, {rss.describe()})", flush=True)
            await asyncio.gather(*(_slack_event(http, limit, tally, slack, base, hostile, index)
                                   for index in range(_n(SLACK_EVENTS, scale))))
            print(f"  slack: {_n(SLACK_EVENTS, scale)} events, {_statuses(tally.statuses.get('slack'))} "
                  f"({time.monotonic() - phase:.0f} s, {rss.describe()})", flush=True)
            await asyncio.gather(*(_discord_message(limit, tally, discord_side, hostile, index)
                                   for index in range(_n(DISCORD_EVENTS, scale))))
            print(f"  discord: {_n(DISCORD_EVENTS, scale)} messages ({time.monotonic() - phase:.0f} s, {rss.describe()})",
                  flush=True)
            await _settle(model)
            print(f"  settled ({time.monotonic() - phase:.0f} s, {rss.describe()})", flush=True)
            lag_after = await lag_buckets(process.port)
            alive = await process.healthy()
        await rss.stop()
        code = await process.terminate()
        return _report(
            tally=tally, process=process, lag=worst_bucket(lag_before, lag_after), rss=rss, canary=canary,
            alive=alive, exit_code=code, seconds=time.monotonic() - started,
        )
    finally:
        if rss is not None:
            await rss.stop()
        if process is not None and process.running:
            await process.kill()
        await discord.stop()
        await slack.close()
        await llm.stop()
        await site.stop()
        await canary.stop()
        await asyncio.to_thread(pg.close)


def _n(count: int, scale: float) -> int:
    return max(1, round(count * scale))


def _tool_set(hostile: Hostile, index: int) -> tuple[str, str, str]:
    if index % 2 == 0:
        arguments, url = hostile.read_url_arguments()
        return "read_url", arguments, url
    return "sql_query", hostile.sql_arguments(), ""


def _sql_database(pg: LoopbackPostgres) -> str:
    """The database sql_query reads: a small table, and a role that may only SELECT it (not a superuser)."""
    url = pg.create_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
        conn.execute("INSERT INTO items SELECT n, 'item ' || n FROM generate_series(1, 500) AS n")
        conn.execute("DO $$ BEGIN CREATE ROLE fuzz_reader LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        conn.execute("GRANT SELECT ON items TO fuzz_reader")
    return url.replace("postgresql://postgres@", "postgresql://fuzz_reader@")


async def _api_key(database_url: str, data_dir: Path) -> str:
    db = Database(url=database_url, data_dir=data_dir)
    await db.open()
    try:
        _, secret = await ApiKeyStore(db).create("fuzz")  # no quota: the fuzz measures the guards, not the limits
    finally:
        await db.close()
    return secret


async def _post(http: aiohttp.ClientSession, limit: asyncio.Semaphore, tally: Tally, base: str, route: str,
                body: Body, secret: str, *, where: str | None = None) -> None:
    headers = {"Authorization": f"Bearer {secret}"}
    if body.content_type:
        headers["Content-Type"] = body.content_type
    async with limit:
        try:
            async with http.post(base + route, data=body.raw, headers=headers) as response:
                await response.read()  # a stream to its end
                tally.record(where or route, response.status, body.raw)
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            tally.failures[f"{where or route}: {type(error).__name__}"] += 1


async def _slack_event(http: aiohttp.ClientSession, limit: asyncio.Semaphore, tally: Tally, slack: SlackEmulator,
                       base: str, hostile: Hostile, index: int) -> None:
    text = hostile.text()[:SLACK_TEXT_MAX]
    async with limit:
        try:
            if index % 4 == 3:
                channel = f"D{index % SLACK_CHANNELS:07d}F"
                ts = slack.add_user_message(channel, text, SLACK_USER)
                event = dm_message_event(text=text, user=SLACK_USER, channel=channel, ts=ts, team_id=slack.team_id)
            else:
                channel = f"C{index % SLACK_CHANNELS:07d}F"
                full = f"<@{slack.bot_user_id}> {text}"
                ts = slack.add_user_message(channel, full, SLACK_USER)
                event = app_mention_event(text=full, user=SLACK_USER, channel=channel, ts=ts, team_id=slack.team_id)
            delivery = await slack.deliver_event(base + "/slack/events", event)
            tally.record("slack", delivery.status)
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            tally.failures[f"slack: {type(error).__name__}"] += 1


async def _discord_message(limit: asyncio.Semaphore, tally: Tally, side: DiscordSide, hostile: Hostile,
                           index: int) -> None:
    text = hostile.text()[:DISCORD_TEXT_MAX]
    async with limit:
        try:
            await side.ask(f"fz{index}", channel_index=index, text=text)
        except Exception as error:  # the emulator refusing a message is the emulator's, counted apart
            tally.failures[f"discord emulator refused: {type(error).__name__}"] += 1


async def _settle(model: FuzzModel) -> None:
    """Until the model has had no call for QUIET_S (answers still in flight finish), at most SETTLE_LIMIT_S."""
    deadline = time.monotonic() + SETTLE_LIMIT_S
    seen, quiet_since = model.calls, time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        if model.calls != seen:
            seen, quiet_since = model.calls, time.monotonic()
        elif time.monotonic() - quiet_since >= QUIET_S:
            return


def _statuses(counter: Counter[int] | None) -> str:
    if not counter:
        return "no answers"
    return ", ".join(f"{status}×{n}" for status, n in sorted(counter.items()))


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISSES TARGET"


def _report(*, tally: Tally, process: BotProcess, lag: tuple[float, float], rss: RssSampler, canary: Canary,
            alive: bool, exit_code: int | None, seconds: float) -> int:
    fives = tally.count_5xx()
    tracebacks = process.tracebacks()
    stall_bound, beats = lag
    growth = rss.peak_mb - rss.baseline_mb
    stalls = process.log_lines(r"event loop stalled")
    lines = [
        f"5xx responses: {fives} (target {TARGET_5XX}): {_verdict(fives <= TARGET_5XX)}",
        f"tracebacks in the log: {tracebacks} (target {TARGET_TRACEBACKS}): {_verdict(tracebacks <= TARGET_TRACEBACKS)}",
        f"worst event-loop stall after warm-up: {'over 10' if math.isinf(stall_bound) else f'≤ {stall_bound:g}'} s "
        f"over {beats:.0f} beats (target ≤ {TARGET_STALL_S:g} s): {_verdict(stall_bound <= TARGET_STALL_S)}",
        f"peak RSS growth: {growth:.0f} MB ({rss.baseline_mb:.0f} → {rss.peak_mb:.0f} MB; target ≤ {TARGET_RSS_MB:g} MB): "
        f"{_verdict(growth <= TARGET_RSS_MB)}",
        f"requests that reached the canary on 127.0.0.2: {len(canary.hits)} (target {TARGET_CANARY}): "
        f"{_verdict(len(canary.hits) <= TARGET_CANARY)}",
        f"whole run: {seconds:.0f} s (target ≤ {RUN_LIMIT_S:g} s): {_verdict(seconds <= RUN_LIMIT_S)}",
    ]
    print()
    for where, counter in tally.statuses.items():
        print(f"  {where}: {_statuses(counter)}")
    for what, n in tally.failures.items():
        print(f"  no answer: {what} ×{n}")
    for example in tally.examples_5xx:
        print(f"  a 5xx: {example}")
    for hit in canary.hits[:5]:
        print(f"  canary hit: {hit}")
    for stall in stalls[:5]:
        print(f"  {stall[:200]}")
    print(f"  watchdog stall warnings: {len(stalls)}; process healthy at the end: {alive}; exit code {exit_code}")
    print()
    for line in lines:
        print(line)
    return 0 if all(line.endswith(": ok") for line in lines) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=21, help="names the generated inputs (default 21)")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the input counts (a quick look: 0.05)")
    args = parser.parse_args()
    # The bench's own site refusing a 100,000-character URL line is the test working, not news.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    return asyncio.run(run(args.seed, args.scale))


if __name__ == "__main__":
    raise SystemExit(main())
