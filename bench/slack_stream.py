"""Benchmark: Slack streaming under Slack's limits (emulated, time-scaled); prints figures.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m bench.slack_stream
"""

from __future__ import annotations

import asyncio
import logging
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.http.server import HttpServer
from adapters.slack import SlackAdapter
from core.store.db import Database
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator, app_mention_event
from tests.support.engine import make_engine
from tests.support.ports import ports_for

TIME_SCALE = 0.05  # a Slack minute lasts 3 real seconds
CONCURRENT_ANSWERS = 100
STEADY_EVENTS = 30
STEADY_RATE_PER_S = 10.0
ANSWER_CHUNK_CHARS = 20
MODEL_CHUNK_DELAY_S = 0.05
WAIT_LIMIT_S = 180.0
USER = "U0000BENCH"


@dataclass(kw_only=True)
class Probe:
    channel: str
    answer: str
    sent_at: float = 0.0
    model_started_at: float = 0.0

    @property
    def model_first_token_at(self) -> float:
        return self.model_started_at + MODEL_CHUNK_DELAY_S

    @property
    def model_last_token_at(self) -> float:
        pieces = math.ceil(len(self.answer) / ANSWER_CHUNK_CHARS)
        return self.model_started_at + pieces * MODEL_CHUNK_DELAY_S


def answer_for(tag: str) -> str:
    return f"Answer for {tag}: " + "the quick brown fox jumps over the lazy dog. " * 8


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(pct / 100 * len(ordered)) - 1))]


class Bench:
    def __init__(self, slack: SlackEmulator, openai: OpenAIEmulator, url: str) -> None:
        self.slack = slack
        self.openai = openai
        self.url = url
        self.probes: dict[str, Probe] = {}
        openai.script_fn(self._reply)

    def _reply(self, body: dict[str, Any]) -> Text:
        question = str(body["messages"][-1].get("content", ""))
        tag = question.rsplit("#", 1)[-1].strip()
        probe = self.probes[tag]
        probe.model_started_at = time.monotonic()
        return Text(probe.answer, chunk_chars=ANSWER_CHUNK_CHARS, delay_s=MODEL_CHUNK_DELAY_S)

    async def ask(self, channel: str) -> float:
        tag = f"{channel}-{len(self.probes)}"
        probe = self.probes[tag] = Probe(channel=channel, answer=answer_for(tag))
        text = f"<@{self.slack.bot_user_id}> benchmark question #{tag}"
        ts = self.slack.add_user_message(channel, text, USER)
        event = app_mention_event(text=text, user=USER, channel=channel, ts=ts, team_id=self.slack.team_id)
        probe.sent_at = time.monotonic()
        delivery = await self.slack.deliver_event(self.url, event)
        assert delivery.status == 200
        return delivery.latency_s

    def _bot_messages(self, probe: Probe) -> list[Any]:
        return [m for m in self.slack.messages(probe.channel) if m.is_bot]

    def delivered(self, probe: Probe) -> bool:
        return any(m.text == probe.answer for m in self._bot_messages(probe))

    def first_text_at(self, probe: Probe) -> float | None:
        times = []
        for message in self._bot_messages(probe):
            if "Answer for" in message.text and not message.edits:
                times.append(message.posted_at_s)
            times += [e.at_s for e in message.edits if "Answer for" in e.text]
        return min(times) if times else None

    def final_at(self, probe: Probe) -> float | None:
        for message in self._bot_messages(probe):
            if message.text == probe.answer:
                return message.edits[-1].at_s if message.edits else message.posted_at_s
        return None

    async def wait_all(self, probes: list[Probe]) -> None:
        deadline = time.monotonic() + WAIT_LIMIT_S
        while time.monotonic() < deadline and not all(self.delivered(p) for p in probes):
            await asyncio.sleep(0.05)


async def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as data_dir:
        db = Database(url=None, data_dir=Path(data_dir))
        await db.open()
        try:
            async with SlackEmulator(time_scale=TIME_SCALE) as slack, OpenAIEmulator() as openai:
                await run(db, slack, openai)
        finally:
            await db.close()


async def run(db: Database, slack: SlackEmulator, openai: OpenAIEmulator) -> None:
    engine = make_engine(db, openai.base_url, slack_bot_token=slack.bot_token, slack_signing_secret=slack.signing_secret,
                         slack_api_url=slack.api_url)
    http = HttpServer(host="127.0.0.1", port=0)
    adapter = SlackAdapter(settings=engine.settings, engine=engine, ports=ports_for(db), http=http, time_scale=TIME_SCALE)
    await http.start()
    await adapter.start()
    bench = Bench(slack, openai, f"http://127.0.0.1:{http.port}/slack/events")
    try:
        # Warm up: Bolt's lazy auth.test, pools, first conversation.
        await bench.ask("C0WARMUP01")
        await bench.wait_all(list(bench.probes.values()))

        # 1. One answer.
        await bench.ask("C0SINGLE01")
        single = bench.probes[list(bench.probes)[-1]]
        await bench.wait_all([single])
        single_first = (bench.first_text_at(single) or math.nan) - single.sent_at - MODEL_CHUNK_DELAY_S

        # 2. 100 concurrent answers in 100 channels (a burst of events).
        await asyncio.sleep(60 * TIME_SCALE)  # let the workspace budget refill
        before = set(bench.probes)
        burst_acks = await asyncio.gather(*(bench.ask(f"C0MANY{n:04d}") for n in range(CONCURRENT_ANSWERS)))
        many = [bench.probes[tag] for tag in bench.probes if tag not in before]
        await bench.wait_all(many)
        firsts = [(bench.first_text_at(p) or math.nan) - p.sent_at - MODEL_CHUNK_DELAY_S for p in many]
        finals = [(bench.final_at(p) or math.nan) - p.model_last_token_at for p in many]

        # 3. Steady 10 events a second.
        await asyncio.sleep(60 * TIME_SCALE)
        steady_acks: list[float] = []
        steady_tasks = []
        for n in range(STEADY_EVENTS):
            steady_tasks.append(asyncio.create_task(bench.ask(f"C0STEADY{n:03d}")))
            await asyncio.sleep(1 / STEADY_RATE_PER_S)
        steady_acks = list(await asyncio.gather(*steady_tasks))
        await bench.wait_all(list(bench.probes.values()))
    finally:
        await adapter.stop_accepting()
        await adapter.close()
        await http.stop()

    limit = slack.limits["chat.update"]
    rate_per_slack_s = limit.calls / limit.window_s
    k = math.ceil(0.95 * CONCURRENT_ANSWERS)
    bound_slack_s = max(0, k - limit.burst) / rate_per_slack_s
    delivered = sum(bench.delivered(p) for p in bench.probes.values())
    print(f"time scale: {TIME_SCALE} (a Slack minute = {60 * TIME_SCALE:g} real s); all times real seconds")
    print(f"429s received: {sum(slack.count_429.values())} {slack.count_429 or ''} (target 0)")
    print(f"final texts delivered: {delivered}/{len(bench.probes)} ({100 * delivered / len(bench.probes):.0f}%)")
    print(f"single answer: event → first answer text, excluding model delay: {1000 * single_first:.0f} ms (target ≤ 100 ms)")
    print(f"{CONCURRENT_ANSWERS} answers: event → first answer text p50 {percentile(firsts, 50):.2f} s, "
          f"p95 {percentile(firsts, 95):.2f} s; emulator budget bound for the {k}th first text "
          f"(chat.update burst {limit.burst}, {limit.calls}/{limit.window_s:g} s): {bound_slack_s * TIME_SCALE:.2f} s "
          f"({bound_slack_s:.0f} Slack s); ratio {percentile(firsts, 95) / (bound_slack_s * TIME_SCALE):.2f} (target ≤ 1.2)")
    print(f"{CONCURRENT_ANSWERS} answers: final text after the model's last token p50 {percentile(finals, 50):.2f} s, "
          f"p95 {percentile(finals, 95):.2f} s")
    print(f"ack latency at a steady {STEADY_RATE_PER_S:g} events/s: p50 {1000 * percentile(steady_acks, 50):.1f} ms, "
          f"p99 {1000 * percentile(steady_acks, 99):.1f} ms (target ≤ 50 ms)")
    print(f"ack latency for a burst of {CONCURRENT_ANSWERS} events at once: p50 {1000 * percentile(list(burst_acks), 50):.1f} ms, "
          f"p99 {1000 * percentile(list(burst_acks), 99):.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
