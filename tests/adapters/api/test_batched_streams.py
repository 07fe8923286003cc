"""Streams whose tokens come faster than they are written: batched writes lose, repeat and reorder nothing."""

from __future__ import annotations

import aiohttp
import openai

from core.store.db import Database
from tests.adapters.api.harness import auth, read_sse, serve_api
from tests.emulators.openai_server import OpenAIEmulator, Text

TOKENS = 400
TEXT = "".join(f"t{n:03d} " for n in range(TOKENS))


async def test_a_fast_v1_stream_arrives_whole_and_in_order(db: Database, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(Text(TEXT, chunk_chars=5))
    async with serve_api(db, openai_emulator.base_url) as api:
        _, secret = await api.keys.create("fast-v1")
        client = openai.AsyncOpenAI(base_url=api.v1, api_key=secret, max_retries=0)
        stream = await client.chat.completions.create(
            model="classic", messages=[{"role": "user", "content": "count"}], stream=True,
            stream_options={"include_usage": True},
        )
        pieces, finish, usage = [], None, None
        async for chunk in stream:
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
            usage = chunk.usage or usage
        await client.close()
    assert "".join(pieces) == TEXT and finish == "stop"
    assert usage is not None and usage.completion_tokens > 0


async def test_a_fast_api_stream_keeps_one_id_per_event_across_a_reconnect(
    db: Database, openai_emulator: OpenAIEmulator,
) -> None:
    openai_emulator.script(Text(TEXT, chunk_chars=5))
    async with serve_api(db, openai_emulator.base_url) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("fast-api")
        url = f"{api.url}/api/answer/stream"
        async with http.post(url, json={"question": "count"}, headers=auth(secret)) as response:
            head = await read_sse(response, limit=5)
        headers = {**auth(secret), "Last-Event-ID": head[-1].id}
        async with http.post(url, json={}, headers=headers) as response:
            rest = await read_sse(response)
    events = head + rest
    assert [int(e.id.rsplit(":", 1)[1]) for e in events] == list(range(1, len(events) + 1))
    deltas = [e.data["text"] for e in events if e.event == "answer_delta"]
    assert len(deltas) == TOKENS and "".join(deltas) == TEXT
    assert events[-1].event == "end"
