"""Ids a client hands back (issue 21 fuzz): a NUL, a control character or a huge id gets a 400 naming the field."""

from __future__ import annotations

import json
import logging

import aiohttp
import pytest

from core.store.api_conversations import ApiConversations
from core.store.db import Database
from tests.adapters.api.harness import Deploys, auth, read_sse, registry_with, serve_api
from tests.emulators.openai_server import Call, OpenAIEmulator, ToolCalls

HOSTILE_IDS = ["conv\u0000", "a\u0001b", "x" * 201, ""]
BODIES = [
    ("/api/answer", lambda cid: {"question": "hi", "conversation_id": cid}),
    ("/api/answer/stream", lambda cid: {"question": "hi", "conversation_id": cid}),
    ("/api/answer", lambda cid: {"conversation_id": cid, "tool_actions": [{"call_id": "c1", "decision": "approve"}]}),
    ("/api/answer/stream", lambda cid: {"conversation_id": cid,
                                        "tool_actions": [{"call_id": "c1", "decision": "approve"}]}),
]


@pytest.mark.parametrize("hostile", HOSTILE_IDS, ids=["nul", "control", "too-long", "empty"])
async def test_a_hostile_conversation_id_gets_a_400_naming_the_field(
    db: Database, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture, hostile: str
) -> None:
    caplog.set_level(logging.INFO)
    async with serve_api(db, openai_emulator.base_url) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create(f"ids {len(hostile)} {hostile[:1]!r}")
        for route, body in BODIES:
            headers = {**auth(secret), "Content-Type": "application/json"}
            async with http.post(f"{api.url}{route}", data=json.dumps(body(hostile)), headers=headers) as response:
                assert response.status == 400, (route, await response.text())
                error = (await response.json())["error"]
            assert error["type"] == "invalid_id" and "`conversation_id`" in error["message"], (route, error)
    assert not openai_emulator.chat_requests
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text


async def test_a_nul_in_a_call_id_gets_a_400_naming_the_field(db: Database, openai_emulator: OpenAIEmulator) -> None:
    async with serve_api(db, openai_emulator.base_url) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("call ids")
        body = {"conversation_id": "00000000-0000-0000-0000-000000000000",
                "tool_actions": [{"call_id": "rbc_\u0000", "decision": "approve"}]}
        async with http.post(f"{api.url}/api/answer", json=body, headers=auth(secret)) as response:
            assert response.status == 400, await response.text()
            assert "`call_id`" in (await response.json())["error"]["message"]


async def test_an_ordinary_unknown_conversation_id_is_still_a_404(db: Database, openai_emulator: OpenAIEmulator) -> None:
    async with serve_api(db, openai_emulator.base_url) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("unknown")
        body = {"question": "hi", "conversation_id": "no-such-conversation"}
        async with http.post(f"{api.url}/api/answer", json=body, headers=auth(secret)) as response:
            assert response.status == 404, await response.text()


async def test_the_store_takes_an_unstorable_id_as_no_such_conversation(db: Database) -> None:
    conversations = ApiConversations(db)
    for hostile in ("conv\u0000", "lone \ud800"):
        assert await conversations.exists(1, hostile) is False
        assert await conversations.latest_continuation(1, hostile) is None


async def test_a_tool_call_whose_arguments_escape_a_nul_is_journaled_and_paused(
    db: Database, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    # JSON arguments escape a NUL as "\u0000", storable as text; parsed, it failed the journal's jsonb insert.
    caplog.set_level(logging.INFO)
    openai_emulator.script(ToolCalls([Call("deploy", '{"target": "prod\\u0000"}', id="call_nul")]))
    async with serve_api(db, openai_emulator.base_url, registry=registry_with(Deploys())) as api, \
            aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("nul arguments")
        async with http.post(f"{api.url}/api/answer/stream", json={"question": "deploy"}, headers=auth(secret)) as response:
            events = await read_sse(response)
    assert [e.event for e in events][-2:] == ["tool_calls_pending", "end"]
    [call] = events[-1].data["pending_approval"]["calls"]
    assert call["arguments"] == {"target": "prod"}
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text
