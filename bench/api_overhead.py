"""Prints the latency /v1/chat/completions (streaming) adds over calling the engine directly, per request and per token.

Run: .venv/bin/python -m bench.api_overhead  (starts an embedded Postgres, the OpenAI emulator and the API in-process).

What is compared: the same scripted answer consumed two ways, each by a consumer that only keeps what arrives
(the engine's deltas in a list; the HTTP body's bytes in a list, read as aiohttp hands them over) and checks it
after the clock stops. Everything between the two is the API's: routing, auth, the quota, the SSE encoding, the
writes, the sockets and aiohttp's HTTP parsing on the client side, all on the one event loop, so nothing runs in
parallel and every microsecond is counted. Parsing each event in Python (`--client lines`, what the first version
of this bench did) is the client's own work, not the API's; it is there to compare with.

Tokens come as fast as the engine yields them, so writes are batched (adapters/http/api/sse.py BATCH_INTERVAL_S:
one write per interval while tokens keep coming, the first one after a quiet spell at once); `--batch-interval-ms 0`
shows the cost when every write goes out as soon as the writer gets its turn. The chunks per answer are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.http.api import sse  # noqa: E402
from adapters.http.api.adapter import ApiAdapter  # noqa: E402
from adapters.http.server import HttpServer  # noqa: E402
from bot.engine_parts import build_engine  # noqa: E402
from core.engine import Engine  # noqa: E402
from core.llm import LLMClient  # noqa: E402
from core.store.api_conversations import ApiConversations  # noqa: E402
from core.store.api_keys import ApiKeyStore  # noqa: E402
from core.store.db import Database  # noqa: E402
from core.store.event_journal import EventJournal  # noqa: E402
from core.tools import builtin_registry  # noqa: E402
from tests.emulators.openai_server import OpenAIEmulator  # noqa: E402
from tests.support.engine import test_settings  # noqa: E402
from bench.overhead import RUNS, STREAM_TOKENS, added, engine_stream, reply, verdict  # noqa: E402

TARGET_PER_TOKEN_US = 20.0
TARGET_FIXED_MS = 5.0


async def api_stream(http: aiohttp.ClientSession, url: str, secret: str, emulator: OpenAIEmulator, tokens: int,
                     client: str = "bytes", chunks_seen: list[int] | None = None) -> float:
    emulator.script(reply(tokens))
    body = {"model": "classic", "messages": [{"role": "user", "content": "bench question"}], "stream": True,
            "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    received: list[bytes] = []
    async with http.post(f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}) as response:
        assert response.status == 200, await response.text()
        if client == "lines":
            async for line in response.content:
                if line.startswith(b"data: "):
                    received.append(line)
        else:
            async for data in response.content.iter_any():
                received.append(data)
    elapsed = time.perf_counter() - started
    # Checked after the clock stops: every token's text arrived, in order, in well-formed chunks.
    events = [line[6:] for line in b"".join(received).split(b"\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]", events[-1:]
    chunks = [json.loads(event) for event in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "tok " * tokens, len(text)
    if chunks_seen is not None:
        chunks_seen.append(sum(1 for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")))
    return elapsed


async def overhead(engine: Engine, http: aiohttp.ClientSession, url: str, secret: str, emulator: OpenAIEmulator,
                   runs: int, client: str) -> dict[str, float]:
    samples: dict[str, list[float]] = {"eng_long": [], "api_long": [], "eng_short": [], "api_short": []}
    chunks: list[int] = []
    for _ in range(2):  # warm up connections, the token counter and Postgres' plan caches
        await engine_stream(engine, emulator, STREAM_TOKENS)
        await api_stream(http, url, secret, emulator, STREAM_TOKENS, client)
    for _ in range(runs):
        samples["eng_long"].append(await engine_stream(engine, emulator, STREAM_TOKENS))
        samples["api_long"].append(await api_stream(http, url, secret, emulator, STREAM_TOKENS, client, chunks))
        samples["eng_short"].append(await engine_stream(engine, emulator, 1))
        samples["api_short"].append(await api_stream(http, url, secret, emulator, 1, client))
    return {**added(samples, base="eng", measured="api"), "chunks": statistics.median(chunks)}


async def main(runs: int, client: str) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="relaybot-bench-"))
    data_dir.chmod(0o755)  # the embedded server runs as its own user when started by root
    db = Database(url=None, data_dir=data_dir)
    await db.open()
    try:
        async with OpenAIEmulator() as emulator:
            settings = test_settings(emulator.base_url, llm_model="gpt-4o-mini")
            llm = LLMClient(base_url=settings.llm_base_url, api_key=settings.llm_api_key,
                            request_timeout_s=settings.llm_request_timeout_s, idle_timeout_s=settings.llm_idle_timeout_s)
            engine = build_engine(settings=settings, db=db, llm=llm, registry=builtin_registry())
            keys = ApiKeyStore(db)
            _, secret = await keys.create(f"bench-{uuid.uuid4().hex[:8]}")
            server = HttpServer(host="127.0.0.1", port=0)
            api = ApiAdapter(engine=engine, keys=keys, conversations=ApiConversations(db), journal=EventJournal(db),
                             max_body_bytes=settings.api_max_body_bytes)
            api.add_to(server.app)
            await server.start()
            try:
                async with aiohttp.ClientSession() as http:
                    figures = await overhead(engine, http, f"http://127.0.0.1:{server.port}", secret, emulator, runs,
                                             client)
            finally:
                await api.close()
                await server.stop()
                await llm.aclose()
    finally:
        await db.close()
        shutil.rmtree(data_dir, ignore_errors=True)

    print(f"medians over {runs} runs, {STREAM_TOKENS} streamed tokens, no artificial delay; {client} client, "
          f"writes batched every {sse.BATCH_INTERVAL_S * 1e3:g} ms at most")
    print(f"  engine.ask()              : {figures['eng_long'] * 1e3:8.1f} ms for {STREAM_TOKENS} tokens, {figures['eng_short'] * 1e3:6.1f} ms for 1")
    print(f"  /v1/chat/completions SSE  : {figures['api_long'] * 1e3:8.1f} ms for {STREAM_TOKENS} tokens, {figures['api_short'] * 1e3:6.1f} ms for 1")
    print(f"  answer text chunks        : {figures['chunks']:8.0f} for {STREAM_TOKENS} tokens")
    print(f"  API added per token   : {figures['per_token_us']:7.2f} µs  (target ≤ {TARGET_PER_TOKEN_US:g})  {verdict(figures['per_token_us'], TARGET_PER_TOKEN_US)}")
    print(f"  API added per request : {figures['fixed_ms']:7.2f} ms  (target ≤ {TARGET_FIXED_MS:g})  {verdict(figures['fixed_ms'], TARGET_FIXED_MS)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="measured runs per figure (medians are printed)")
    parser.add_argument("--client", choices=("bytes", "lines"), default="bytes",
                        help="bytes: keep the body as aiohttp reads it; lines: split it into lines in Python as well")
    parser.add_argument("--batch-interval-ms", type=float, default=None,
                        help="override sse.BATCH_INTERVAL_S (0: write whenever the writer gets its turn)")
    args = parser.parse_args()
    if args.batch_interval_ms is not None:
        sse.BATCH_INTERVAL_S = args.batch_interval_ms / 1e3
    asyncio.run(main(args.runs, args.client))
