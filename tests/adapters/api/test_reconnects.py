"""SSE reconnects (issue 21, item 8): a Last-Event-ID of no stream of this key is a 404 at once, and a key holds
only a few reconnects open at a time."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp

from adapters.http.api.streams import RECONNECTS_PER_KEY
from core.store.db import Database
from tests.adapters.api.harness import auth, read_sse, serve_api
from tests.emulators.openai_server import OpenAIEmulator, Text


async def test_an_id_zero_of_no_stream_of_this_key_is_a_404(db: Database, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script_fn(lambda body: Text("Short answer."))
    async with serve_api(db, openai_emulator.base_url) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("zero")
        _, other = await api.keys.create("zero other")
        url = f"{api.url}/api/answer/stream"
        # A made-up stream: refused before any stream opens (it used to be a 200 polling the journal for 120 s).
        async with http.post(url, json={}, headers={**auth(secret), "Last-Event-ID": f"{uuid.uuid4()}:0"}) as response:
            assert response.status == 404 and (await response.json())["error"]["type"] == "stream_not_found"
        async with http.post(url, json={"question": "hi"}, headers=auth(secret)) as response:
            events = await read_sse(response)
        stream = events[0].id.rsplit(":", 1)[0]
        # This key's own stream, in this process: `:0` replays it whole.
        async with http.post(url, json={}, headers={**auth(secret), "Last-Event-ID": f"{stream}:0"}) as response:
            assert response.status == 200
            assert [e.id for e in await read_sse(response)] == [e.id for e in events]
        # Another key's stream, in memory or only in the journal (as another process sees it): 404 either way.
        async with http.post(url, json={}, headers={**auth(other), "Last-Event-ID": f"{stream}:0"}) as response:
            assert response.status == 404
        api.adapter.hub._streams.clear()
        async with http.post(url, json={}, headers={**auth(other), "Last-Event-ID": f"{stream}:0"}) as response:
            assert response.status == 404
        # A real id of this key's stream is still read back from the journal.
        async with http.post(url, json={}, headers={**auth(secret), "Last-Event-ID": f"{stream}:1"}) as response:
            assert response.status == 200
            assert [e.id for e in await read_sse(response)] == [e.id for e in events[1:]]


async def test_a_key_holds_a_few_reconnects_open_at_once(db: Database, openai_emulator: OpenAIEmulator) -> None:
    text = "slowly, one character at a time, " * 3
    openai_emulator.script(Text(text, chunk_chars=1, delay_s=0.03))
    async with serve_api(db, openai_emulator.base_url) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("reconnects")
        url = f"{api.url}/api/answer/stream"
        async with http.post(url, json={"question": "slow"}, headers=auth(secret)) as response:
            first = (await read_sse(response, limit=1))[0]
        headers = {**auth(secret), "Last-Event-ID": first.id}
        open_ones = [await http.post(url, json={}, headers=headers) for _ in range(RECONNECTS_PER_KEY)]
        try:
            assert [r.status for r in open_ones] == [200] * RECONNECTS_PER_KEY
            async with http.post(url, json={}, headers=headers) as refused:
                assert refused.status == 429 and (await refused.json())["error"]["type"] == "too_many_reconnects"
            # A made-up id is refused by the cap too: a key cannot hold more lookups open than that.
            async with http.post(url, json={}, headers={**auth(secret), "Last-Event-ID": f"{uuid.uuid4()}:3"}) as r:
                assert r.status == 429
            rest = await read_sse(open_ones[0])
            assert rest[-1].event == "end"
        finally:
            for response in open_ones:
                response.close()
        # Slots come back as their streams end or their clients leave.
        for _ in range(100):
            if not api.adapter.hub._reconnects:
                break
            await asyncio.sleep(0.05)
        async with http.post(url, json={}, headers=headers) as response:
            assert response.status == 200 and (await read_sse(response))[-1].event == "end"
