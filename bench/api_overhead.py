"""Prints the latency /v1/chat/completions (streaming) adds over calling the engine directly, per request and per token.

Run: .venv/bin/python bench/api_overhead.py  (starts an embedded Postgres, the OpenAI emulator and the API in-process;
the HTTP side is read by a plain aiohttp client that only splits the SSE lines, so the figures are the server's)
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

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.http.api.adapter import ApiAdapter  # noqa: E402
from adapters.http.server import HttpServer  # noqa: E402
from core.engine import Engine  # noqa: E402
from core.events import Done  # noqa: E402
from core.llm import LLMClient  # noqa: E402
from core.requests import Actor, ConversationKey, Request  # noqa: E402
from core.store.api_conversations import ApiConversations  # noqa: E402
from core.store.api_keys import ApiKeyStore  # noqa: E402
from core.store.db import Database  # noqa: E402
from core.store.event_journal import EventJournal  # noqa: E402
from core.tools import builtin_registry  # noqa: E402
from tests.emulators.openai_server import OpenAIEmulator, Text  # noqa: E402
from tests.support.engine import test_settings  # noqa: E402

STREAM_TOKENS = 2_000
TOKEN_CHARS = 4  # one emulator chunk per "token"
RUNS = 9
TARGET_PER_TOKEN_US = 20.0
TARGET_FIXED_MS = 5.0


def reply(tokens: int) -> Text:
    return Text("tok " * tokens, chunk_chars=TOKEN_CHARS)


async def engine_stream(engine: Engine, emulator: OpenAIEmulator, tokens: int) -> float:
    emulator.script(reply(tokens))
    request = Request(
        question="bench question",
        conversation=ConversationKey(platform="bench", workspace="W", channel=f"C{uuid.uuid4().hex[:12]}"),
        user=Actor(id="U1", name="bench"),
    )
    started = time.perf_counter()
    last = None
    async for event in engine.ask(request):
        last = event
    elapsed = time.perf_counter() - started
    assert isinstance(last, Done) and len(last.answer) == tokens * TOKEN_CHARS, last
    return elapsed


async def api_stream(http: aiohttp.ClientSession, url: str, secret: str, emulator: OpenAIEmulator, tokens: int) -> float:
    emulator.script(reply(tokens))
    body = {"model": "classic", "messages": [{"role": "user", "content": "bench question"}], "stream": True,
            "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    chunks = 0
    async with http.post(f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}) as response:
        assert response.status == 200, await response.text()
        async for line in response.content:
            if line.startswith(b"data: "):
                chunks += 1
    elapsed = time.perf_counter() - started
    assert chunks >= tokens, chunks
    return elapsed


async def overhead(engine: Engine, http: aiohttp.ClientSession, url: str, secret: str, emulator: OpenAIEmulator,
                   runs: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {"eng_long": [], "api_long": [], "eng_short": [], "api_short": []}
    for _ in range(2):  # warm up connections, the token counter and Postgres' plan caches
        await engine_stream(engine, emulator, STREAM_TOKENS)
        await api_stream(http, url, secret, emulator, STREAM_TOKENS)
    for _ in range(runs):
        samples["eng_long"].append(await engine_stream(engine, emulator, STREAM_TOKENS))
        samples["api_long"].append(await api_stream(http, url, secret, emulator, STREAM_TOKENS))
        samples["eng_short"].append(await engine_stream(engine, emulator, 1))
        samples["api_short"].append(await api_stream(http, url, secret, emulator, 1))
    med = {name: statistics.median(values) for name, values in samples.items()}
    fixed_s = med["api_short"] - med["eng_short"]
    per_token_s = ((med["api_long"] - med["eng_long"]) - fixed_s) / (STREAM_TOKENS - 1)
    return {**med, "fixed_ms": fixed_s * 1e3, "per_token_us": per_token_s * 1e6}


def verdict(value: float, target: float) -> str:
    return "ok" if value <= target else "MISSES TARGET"


async def main(runs: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="relaybot-bench-"))
    data_dir.chmod(0o755)  # the embedded server runs as its own user when started by root
    db = Database(url=None, data_dir=data_dir)
    await db.open()
    try:
        async with OpenAIEmulator() as emulator:
            settings = test_settings(emulator.base_url, llm_model="gpt-4o-mini")
            llm = LLMClient(base_url=settings.llm_base_url, api_key=settings.llm_api_key,
                            request_timeout_s=settings.llm_request_timeout_s, idle_timeout_s=settings.llm_idle_timeout_s)
            engine = Engine(settings=settings, db=db, llm=llm, registry=builtin_registry())
            keys = ApiKeyStore(db)
            _, secret = await keys.create(f"bench-{uuid.uuid4().hex[:8]}")
            server = HttpServer(host="127.0.0.1", port=0)
            api = ApiAdapter(engine=engine, keys=keys, conversations=ApiConversations(db), journal=EventJournal(db),
                             max_body_bytes=settings.api_max_body_bytes)
            api.add_to(server.app)
            await server.start()
            try:
                async with aiohttp.ClientSession() as http:
                    figures = await overhead(engine, http, f"http://127.0.0.1:{server.port}", secret, emulator, runs)
            finally:
                await api.close()
                await server.stop()
                await llm.aclose()
    finally:
        await db.close()
        shutil.rmtree(data_dir, ignore_errors=True)

    print(f"medians over {runs} runs, {STREAM_TOKENS} streamed tokens, no artificial delay")
    print(f"  engine.ask()              : {figures['eng_long'] * 1e3:8.1f} ms for {STREAM_TOKENS} tokens, {figures['eng_short'] * 1e3:6.1f} ms for 1")
    print(f"  /v1/chat/completions SSE  : {figures['api_long'] * 1e3:8.1f} ms for {STREAM_TOKENS} tokens, {figures['api_short'] * 1e3:6.1f} ms for 1")
    print(f"  API added per token   : {figures['per_token_us']:7.2f} µs  (target ≤ {TARGET_PER_TOKEN_US:g})  {verdict(figures['per_token_us'], TARGET_PER_TOKEN_US)}")
    print(f"  API added per request : {figures['fixed_ms']:7.2f} ms  (target ≤ {TARGET_FIXED_MS:g})  {verdict(figures['fixed_ms'], TARGET_FIXED_MS)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="measured runs per figure (medians are printed)")
    asyncio.run(main(parser.parse_args().runs))
