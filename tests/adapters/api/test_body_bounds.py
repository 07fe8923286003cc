"""Hostile JSON bodies (issue 21, item 9): deep nesting, huge integers and lone surrogates get a 400, never a 500."""

from __future__ import annotations

import logging

import aiohttp
import pytest

from core.store.db import Database
from tests.adapters.api.harness import auth, serve_api
from tests.emulators.openai_server import OpenAIEmulator

DEEP = b'{"question": "hi", "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
HUGE_INT = b'{"question": "hi", "n": ' + b"9" * 5_000 + b"}"
LONE_SURROGATE = b'{"question": "\\ud800"}'
ROUTES = ["/api/answer", "/api/answer/stream", "/v1/chat/completions"]


@pytest.mark.parametrize("body, says", [(DEEP, "nests deeper"), (HUGE_INT, "more than 100 digits"),
                                        (LONE_SURROGATE, "lone UTF-16 surrogate")], ids=["deep", "huge-int", "surrogate"])
async def test_a_hostile_body_gets_a_clear_400_on_every_route(
    db: Database, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture, body: bytes, says: str
) -> None:
    caplog.set_level(logging.INFO)
    async with serve_api(db, openai_emulator.base_url, max_body_bytes=200_000) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create(f"hostile {says}")
        for route in ROUTES:
            headers = {**auth(secret), "Content-Type": "application/json"}
            async with http.post(f"{api.url}{route}", data=body, headers=headers) as response:
                assert response.status == 400, (route, await response.text())
                error = (await response.json())["error"]
            assert error["type"] == "invalid_json" and says in error["message"], (route, error)
    assert not openai_emulator.chat_requests
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text


async def test_a_surrogate_pair_and_a_long_float_are_still_taken(db: Database, openai_emulator: OpenAIEmulator) -> None:
    async with serve_api(db, openai_emulator.base_url) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("fine")
        body = b'{"question": "smile \\ud83d\\ude00", "x": 0.' + b"1" * 500 + b"}"
        headers = {**auth(secret), "Content-Type": "application/json"}
        async with http.post(f"{api.url}/api/answer", data=body, headers=headers) as response:
            assert response.status == 200, await response.text()
    assert "smile \U0001F600" in openai_emulator.chat_requests[0]["messages"][-1]["content"]
