"""Benchmark: Discord streaming under per-channel limits (emulated, time-scaled); prints figures.

Scenario 0: one answer alone (its final text should show at once after the model's last token).
Scenario 1: 50 concurrent answers, one per channel (each mention opens its own thread).
Scenario 2: 10 concurrent /ask answers posting into one channel.
The emulator allows 5 creates+edits per 5 s per channel; the bot budgets 4 (the default).

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m bench.discord_stream
"""

from __future__ import annotations

import asyncio
import logging
import math
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from adapters.discord import DiscordAdapter, DiscordTuning
from core.engine import Engine
from core.events import Done, Event
from core.requests import Request
from core.store.db import Database
from tests.emulators.discord import DiscordEmulator, RateLimitConfig, StoredMessage, point_discord_py_at
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine
from tests.support.ports import ports_for

TIME_SCALE = 0.1  # a 5 s Discord window lasts 0.5 real seconds
CHANNEL_BUDGET_PER_5S = 4
EMULATOR_LIMIT_PER_5S = 5
ANSWER_CHARS = 1_500  # one message each, so every answer needs exactly one final call
ANSWER_CHUNK_CHARS = 25
MODEL_CHUNK_DELAY_S = 0.03
WAIT_LIMIT_S = 240.0
PLACEHOLDER = "_thinking…_"


@dataclass(kw_only=True)
class Probe:
    key: str
    answer: str
    sent_at: float = 0.0
    done_at: float = 0.0


def answer_text(index: int) -> str:
    sentence = f"Answer {index}: streaming into Discord under a channel budget. "
    return (sentence * (ANSWER_CHARS // len(sentence) + 1))[:ANSWER_CHARS].rstrip()


def p95(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def time_done(engine: Engine, probes: dict[str, Probe]) -> None:
    """Records when each run yields Done: the model's last token has arrived by then."""
    ask = engine.ask

    async def timed(request: Request) -> AsyncIterator[Event]:
        async for event in ask(request):
            if isinstance(event, Done):
                probe = probes.get(request.question)
                if probe is not None:
                    probe.done_at = time.time()
            yield event

    engine.ask = timed  # type: ignore[method-assign]


def first_text_at(messages: list[StoredMessage]) -> float | None:
    for message in messages:
        for version in message.versions:
            if version.content and version.content != PLACEHOLDER:
                return version.at
    return None


def final_at(messages: list[StoredMessage], answer: str) -> float | None:
    if "".join(m.content for m in messages) != answer:
        return None
    return max(next(v.at for v in m.versions if v.content == m.content) for m in messages)


# One answer alone: its final text after the model's last token, in Discord time.
ALONE_FINAL_TARGET_S = 0.5


@dataclass(kw_only=True)
class Scenario:
    name: str
    one_channel: bool
    channels: list[int]
    user: int
    count: int


def make_scenario(dc: DiscordEmulator, name: str, *, one_channel: bool, count: int) -> Scenario:
    """Guilds must exist before the bot connects: GUILD_CREATE is sent at IDENTIFY."""
    guild = dc.add_guild(f"{name} guild")
    channels = [dc.add_channel(guild, f"c{i}") for i in range(1 if one_channel else count)]
    return Scenario(
        name=name, one_channel=one_channel, channels=channels, user=dc.add_user(f"user-{name}"), count=count
    )


async def run_scenario(
    scenario: Scenario, dc: DiscordEmulator, adapter: DiscordAdapter, engine: Engine, openai: OpenAIEmulator
) -> None:
    name, one_channel, channels, user, count = (
        scenario.name, scenario.one_channel, scenario.channels, scenario.user, scenario.count
    )
    probes = {f"{name} question {i}": Probe(key=f"{name} question {i}", answer=answer_text(i)) for i in range(count)}
    answers = {probe.key: probe.answer for probe in probes.values()}
    openai.script_fn(
        lambda body: Text(
            answers[str(body["messages"][-1]["content"])], chunk_chars=ANSWER_CHUNK_CHARS, delay_s=MODEL_CHUNK_DELAY_S
        )
    )
    time_done(engine, probes)
    before_429, before_global = dc.count_429, dc.count_global_429

    sent: dict[str, int] = {}

    async def ask(index: int, probe: Probe) -> None:
        probe.sent_at = time.time()
        channel = channels[0 if one_channel else index]
        if one_channel:
            sent[probe.key] = await dc.invoke_slash("ask", {"question": probe.key}, user, channel)
        else:
            sent[probe.key] = await dc.send_user_message(channel, user, probe.key, mentions_bot=True)

    started = time.monotonic()
    await asyncio.gather(*(ask(i, probe) for i, probe in enumerate(probes.values())))

    def messages_of(probe: Probe) -> list[StoredMessage]:
        source = sent[probe.key]
        if one_channel:
            return [m for m in dc.messages(channels[0]) if m.interaction_id == source]
        thread = dc.thread_of(source)
        return [] if thread is None else [m for m in dc.messages(thread.id) if m.author_id == dc.bot_user_id]

    def all_final() -> bool:
        return all(final_at(messages_of(p), p.answer) is not None for p in probes.values())

    try:
        await dc.wait_for(all_final, WAIT_LIMIT_S, what=f"{name}: every final text")
    except TimeoutError as exc:
        print(f"  {exc}")
    elapsed = time.monotonic() - started

    delivered = [p for p in probes.values() if final_at(messages_of(p), p.answer) is not None]
    edits = [m.edit_count for p in probes.values() for m in messages_of(p)]
    # The emulator sleeps one chunk delay before the first token: that is the model's delay.
    first_model_chunk_s = MODEL_CHUNK_DELAY_S
    first_text = [
        t - p.sent_at - first_model_chunk_s for p in probes.values() if (t := first_text_at(messages_of(p))) is not None
    ]
    final_delays = [
        at - p.done_at for p in delivered if p.done_at and (at := final_at(messages_of(p), p.answer)) is not None
    ]
    finals_per_channel = count if one_channel else 1
    bound_s = adapter.budgets.bound_s(0) + finals_per_channel / _refill_per_s(adapter)
    print(f"{name}: {count} concurrent answers in {len(channels)} channel(s), {elapsed:.1f} s real")
    print(f"  429s received:                     {dc.count_429 - before_429} (target 0; "
          f"{dc.count_global_429 - before_global} of them global)")
    print(f"  final texts delivered:             {len(delivered)}/{count} ({100 * len(delivered) / count:.0f}%)")
    print(f"  edits per message:                 mean {sum(edits) / max(1, len(edits)):.1f}, max {max(edits, default=0)}")
    print(f"  p95 event → first answer text:     {p95(first_text) * 1000:.0f} ms real"
          f" ({p95(first_text) / TIME_SCALE:.2f} s Discord time), model delay excluded")
    print(f"  p95 final delay after last token:  {p95(final_delays) * 1000:.0f} ms real"
          f" ({p95(final_delays) / TIME_SCALE:.2f} s Discord time)")
    if count == 1:
        print(f"  target for an answer alone:        final ≤ {ALONE_FINAL_TARGET_S:g} s Discord time after the last token "
              f"({ALONE_FINAL_TARGET_S * TIME_SCALE * 1000:.0f} ms real): "
              f"{'met' if p95(final_delays) / TIME_SCALE <= ALONE_FINAL_TARGET_S else 'NOT met'}")
        return
    print(f"  bound the channel budget allows:   {bound_s * 1000:.0f} ms real ({bound_s / TIME_SCALE:.2f} s Discord time)"
          f" = {finals_per_channel} final call(s) / refill; ratio {p95(final_delays) / bound_s:.2f} (target ≤ 1.2)")


def _refill_per_s(adapter: DiscordAdapter) -> float:
    return adapter.budgets(-1).refill_per_s


async def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory() as data_dir:
        db = Database(url=None, data_dir=Path(data_dir))
        await db.open()
        rate_limit = RateLimitConfig(limit=EMULATOR_LIMIT_PER_5S, window_s=5.0)
        try:
            async with OpenAIEmulator() as openai, DiscordEmulator(time_scale=TIME_SCALE, rate_limit=rate_limit) as dc:
                engine = make_engine(
                    db,
                    openai.base_url,
                    discord_token=dc.token,
                    discord_api_base=dc.api_base,
                    discord_gateway_url=dc.gateway_url,
                    discord_channel_budget_per_5s=CHANNEL_BUDGET_PER_5S,
                )
                tuning = DiscordTuning(
                    guild_ready_timeout_s=0.05,
                    budget_window_s=5.0 * TIME_SCALE,
                    min_edit_interval_s=1.0 * TIME_SCALE,
                    backoff_base_s=0.5 * TIME_SCALE,
                    global_window_s=1.0 * TIME_SCALE,
                )
                scenarios = [
                    make_scenario(dc, "alone", one_channel=False, count=1),
                    make_scenario(dc, "many-channels", one_channel=False, count=50),
                    make_scenario(dc, "one-channel", one_channel=True, count=10),
                ]
                adapter = DiscordAdapter(settings=engine.settings, engine=engine, ports=ports_for(db), tuning=tuning)
                with point_discord_py_at(dc):
                    await adapter.start()
                    try:
                        for scenario in scenarios:
                            await run_scenario(scenario, dc, adapter, engine, openai)
                    finally:
                        await adapter.close()
        finally:
            await db.close()


if __name__ == "__main__":
    asyncio.run(main())
