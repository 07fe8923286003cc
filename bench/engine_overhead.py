"""Prints the engine's own cost over a raw model stream, and the cost of history loading and message building.

Run: .venv/bin/python bench/engine_overhead.py  (starts an embedded Postgres and the OpenAI emulator in-process)
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.agents.token_budget import HistoryTurn, build_messages  # noqa: E402
from bot.engine_parts import build_engine  # noqa: E402
from core.engine import Engine, load_system_prompt  # noqa: E402
from core.history import TurnHistory  # noqa: E402
from core.llm import LLMClient, TextPiece  # noqa: E402
from core.requests import ConversationKey  # noqa: E402
from core.store.conversations import NewMessage  # noqa: E402
from core.store.db import Database  # noqa: E402
from core.tools import builtin_registry  # noqa: E402
from tests.emulators.openai_server import OpenAIEmulator  # noqa: E402
from tests.support.engine import test_settings  # noqa: E402
from bench.overhead import RUNS, STREAM_TOKENS, TOKEN_CHARS, added, engine_stream, reply, verdict  # noqa: E402

HISTORY_TURNS = 2_000
TARGET_PER_TOKEN_US = 30.0
TARGET_FIXED_MS = 15.0
TARGET_BUILD_MS = 5.0
# A context big enough for the whole history to fit: the worst case for building.
BUILD_CONTEXT_LIMIT = 1_000_000


async def raw_stream(llm: LLMClient, engine: Engine, emulator: OpenAIEmulator, tokens: int) -> float:
    """Seconds to consume the same reply through the bare client, with a prompt like the engine's."""
    emulator.script(reply(tokens))
    messages = [{"role": "system", "content": load_system_prompt(engine.settings)}, {"role": "user", "content": "bench question"}]
    started = time.perf_counter()
    text = []
    async for piece in llm.stream(model=engine.model, messages=messages, tools=engine.registry.openai_tools(engine.registry.names())):
        if isinstance(piece, TextPiece):
            text.append(piece.text)
    elapsed = time.perf_counter() - started
    assert len("".join(text)) == tokens * TOKEN_CHARS
    return elapsed


async def stream_overhead(engine: Engine, llm: LLMClient, emulator: OpenAIEmulator, runs: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {"raw_long": [], "eng_long": [], "raw_short": [], "eng_short": []}
    for _ in range(2):  # warm up connections, the token counter and Postgres' plan caches
        await raw_stream(llm, engine, emulator, STREAM_TOKENS)
        await engine_stream(engine, emulator, STREAM_TOKENS)
    for _ in range(runs):
        samples["raw_long"].append(await raw_stream(llm, engine, emulator, STREAM_TOKENS))
        samples["eng_long"].append(await engine_stream(engine, emulator, STREAM_TOKENS))
        samples["raw_short"].append(await raw_stream(llm, engine, emulator, 1))
        samples["eng_short"].append(await engine_stream(engine, emulator, 1))
    return added(samples, base="raw", measured="eng")


def history_turns(count: int) -> list[HistoryTurn]:
    turns = []
    for index in range(count):
        user = {"role": "user", "content": f"question number {index} about the deployment schedule"}
        assistant = {"role": "assistant", "content": f"answer number {index}: the deployment runs every Tuesday at noon"}
        turns.append(HistoryTurn(messages=(user, assistant), tokens=30))
    return turns


def build_time_ms(engine: Engine, runs: int) -> tuple[float, int]:
    history = history_turns(HISTORY_TURNS)
    samples = []
    kept = 0
    for _ in range(runs):
        started = time.perf_counter()
        built = build_messages(
            system_prompt=load_system_prompt(engine.settings),
            query="bench question",
            history=history,
            counter=engine.counter,
            context_limit=BUILD_CONTEXT_LIMIT,
            max_tokens=None,
        )
        samples.append(time.perf_counter() - started)
        kept = built.history_turns
    return statistics.median(samples) * 1e3, kept


async def load_time_ms(engine: Engine, runs: int) -> tuple[float, float, int]:
    """Median ms to read a 2,000-turn conversation (rows only, and rows → counted turns)."""
    key = ConversationKey(platform="bench", workspace="W", channel="C-history")
    conversation_id = await engine.conversations.get_or_create(key)
    for index in range(HISTORY_TURNS):
        pair = (
            ("user", f"question number {index} about the deployment schedule"),
            ("assistant", f"answer number {index}: the deployment runs every Tuesday at noon"),
        )
        counted = [
            NewMessage(
                role=role,
                content=content,
                token_count=engine.counter.count_message({"role": role, "content": content}),
                token_encoding=engine.counter.encoding_name,
            )
            for role, content in pair
        ]
        await engine.conversations.append(conversation_id, uuid.uuid4(), counted)
    rows_samples, turns_samples = [], []
    turns: list[HistoryTurn] = []
    for _ in range(runs):
        started = time.perf_counter()
        await engine.conversations.history(conversation_id)
        rows_samples.append(time.perf_counter() - started)
        started = time.perf_counter()
        turns = await TurnHistory(engine.conversations, engine.counter).load(conversation_id)
        turns_samples.append(time.perf_counter() - started)
    return statistics.median(rows_samples) * 1e3, statistics.median(turns_samples) * 1e3, len(turns)


async def main(runs: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="relaybot-bench-"))
    data_dir.chmod(0o755)  # the embedded server runs as its own user when started by root
    db = Database(url=None, data_dir=data_dir)
    await db.open()
    try:
        async with OpenAIEmulator() as emulator:
            settings = test_settings(emulator.base_url, llm_model="gpt-4o-mini")
            llm = LLMClient(
                base_url=settings.llm_base_url,
                api_key=settings.llm_api_key,
                request_timeout_s=settings.llm_request_timeout_s,
                idle_timeout_s=settings.llm_idle_timeout_s,
            )
            engine = build_engine(settings=settings, db=db, llm=llm, registry=builtin_registry())
            stream = await stream_overhead(engine, llm, emulator, runs)
            build_ms, kept = build_time_ms(engine, runs)
            rows_ms, turns_ms, loaded = await load_time_ms(engine, runs)
            await llm.aclose()
    finally:
        await db.close()
        shutil.rmtree(data_dir, ignore_errors=True)

    print(f"medians over {runs} runs, {STREAM_TOKENS} streamed tokens, no artificial delay")
    print(f"  raw client   : {stream['raw_long'] * 1e3:8.1f} ms for {STREAM_TOKENS} tokens, {stream['raw_short'] * 1e3:6.1f} ms for 1")
    print(f"  engine.ask() : {stream['eng_long'] * 1e3:8.1f} ms for {STREAM_TOKENS} tokens, {stream['eng_short'] * 1e3:6.1f} ms for 1")
    print(f"  added per token   : {stream['per_token_us']:7.2f} µs  (target ≤ {TARGET_PER_TOKEN_US:g})  {verdict(stream['per_token_us'], TARGET_PER_TOKEN_US)}")
    print(f"  added per request : {stream['fixed_ms']:7.2f} ms  (target ≤ {TARGET_FIXED_MS:g})  {verdict(stream['fixed_ms'], TARGET_FIXED_MS)}")
    print(f"  build messages from {HISTORY_TURNS} loaded turns ({kept} kept): {build_ms:.2f} ms  (target ≤ {TARGET_BUILD_MS:g})  {verdict(build_ms, TARGET_BUILD_MS)}")
    print(f"  load {HISTORY_TURNS} turns from Postgres: {rows_ms:.1f} ms rows, {turns_ms:.1f} ms rows → {loaded} counted turns")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="measured runs per figure (medians are printed)")
    asyncio.run(main(parser.parse_args().runs))
