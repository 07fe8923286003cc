"""A NUL in a question on every API route is answered, never a 5xx and a traceback (issue 21, the fuzz suite's 5xx)."""

from __future__ import annotations

import json
import logging

import aiohttp
import pytest

from core.store.db import Database
from tests.adapters.api.harness import auth, serve_api
from tests.emulators.openai_server import OpenAIEmulator, Text

BODIES = {
    "/api/answer": {"question": "status\u0000 of the deploy?"},
    "/api/answer/stream": {"question": "status\u0000 of the deploy?"},
    "/v1/chat/completions": {"model": "classic", "messages": [{"role": "user", "content": "status\u0000 of the deploy?"}]},
}


@pytest.mark.parametrize("route", list(BODIES))
async def test_a_question_with_nul_is_answered_on_every_route(
    db: Database, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture, route: str
) -> None:
    caplog.set_level(logging.INFO)
    openai_emulator.script(Text("All green."))
    async with serve_api(db, openai_emulator.base_url) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create(f"nul {route}")
        headers = {**auth(secret), "Content-Type": "application/json"}
        async with http.post(f"{api.url}{route}", data=json.dumps(BODIES[route]), headers=headers) as response:
            text = await response.text()
            assert response.status == 200, text
    assert "All gree" in text  # streamed in pieces on /api/answer/stream
    assert openai_emulator.chat_requests[-1]["messages"][-1]["content"] == "status of the deploy?"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text
