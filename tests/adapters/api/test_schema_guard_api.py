"""Client tools over /v1 and /api/answer: a schema that points outside itself or uses a pattern RE2 refuses gets a
400 naming the problem, and the server never fetches the URL or reads the file it names."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web

from core.store.db import Database
from tests.adapters.api.harness import auth, read_sse, serve_api
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.loopback_site import LoopbackSite

SECRET = "postgres://admin:hunter2@db"


class Canary(LoopbackSite):
    """Serves a schema at any path (as instance metadata would) and keeps every hit: a guarded server makes none."""

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        return web.json_response({"db": {"const": SECRET}})


@pytest.fixture
async def canary() -> AsyncIterator[Canary]:
    site = Canary()
    await site.start()
    yield site
    await site.stop()


def tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "lookup", "description": "Look a key up.", "parameters": parameters}}


def hostile_schemas(canary: Canary, secret_file: Path) -> dict[str, tuple[dict[str, Any], str]]:
    """Each hostile schema and the words the 400 must name."""
    return {
        "remote": ({"type": "object", "properties": {"key": {"$ref": f"{canary.base}/latest/meta-data"}}},
                   "does not point inside the schema"),
        "file": ({"type": "object", "properties": {"key": {"$ref": f"{secret_file.as_uri()}#/db"}}},
                 "does not point inside the schema"),
        "lookahead": ({"type": "object", "properties": {"key": {"type": "string", "pattern": "^(?=a)a$"}}},
                      "cannot be compiled by RE2"),
    }


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.json"
    path.write_text(json.dumps({"db": {"const": SECRET}}), encoding="utf-8")
    return path


async def test_v1_refuses_hostile_client_tool_schemas_with_a_400_and_fetches_nothing(
    db: Database, openai_emulator: OpenAIEmulator, canary: Canary, secret_file: Path
) -> None:
    cases = hostile_schemas(canary, secret_file)
    # Were a schema taken, the model would call its tool and the arguments would be checked against it.
    for _ in cases:
        openai_emulator.script(ToolCalls([Call("lookup", '{"key": "x"}', id="c_lookup")]), Text("done"))
    async with serve_api(db, openai_emulator.base_url) as api:
        _, secret = await api.keys.create("hostile-v1", tokens_per_day=1_000_000)
        client = openai.AsyncOpenAI(base_url=api.v1, api_key=secret, max_retries=0)
        for name, (parameters, words) in cases.items():
            with pytest.raises(openai.BadRequestError) as refused:
                await client.chat.completions.create(model="classic", messages=[{"role": "user", "content": "key?"}],
                                                     tools=[tool(parameters)])  # type: ignore[list-item]
            assert refused.value.code == "invalid_tool", name
            assert words in refused.value.message and "lookup" in refused.value.message, (name, refused.value.message)
            assert SECRET not in refused.value.message
        await client.close()
    assert canary.hits == []
    assert openai_emulator.chat_requests == []


async def test_api_answer_refuses_hostile_client_tool_schemas_with_a_400_and_fetches_nothing(
    db: Database, openai_emulator: OpenAIEmulator, canary: Canary, secret_file: Path
) -> None:
    cases = hostile_schemas(canary, secret_file)
    for _ in cases:
        openai_emulator.script(ToolCalls([Call("lookup", '{"key": "x"}', id="c_lookup")]), Text("done"))
    async with serve_api(db, openai_emulator.base_url) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("hostile-answer", tokens_per_day=1_000_000)
        for name, (parameters, words) in cases.items():
            for route in ("/api/answer", "/api/answer/stream"):
                body = {"question": "key?", "tools": [tool(parameters)["function"]]}
                async with http.post(f"{api.url}{route}", json=body, headers=auth(secret)) as response:
                    text = await response.text()
                    assert response.status == 400, (name, route, text)
                error = json.loads(text)["error"]
                assert error["type"] == "invalid_tool" and words in error["message"], (name, route, error)
                assert SECRET not in text
    assert canary.hits == []
    assert openai_emulator.chat_requests == []


@pytest.mark.timeout(60)
async def test_a_catastrophic_pattern_in_a_client_tool_is_checked_in_bounded_work(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    parameters = {"type": "object", "properties": {"key": {"type": "string", "pattern": "^(a+)+$"}}, "required": ["key"]}
    hostile = json.dumps({"key": "a" * 60 + "!"})
    openai_emulator.script(ToolCalls([Call("lookup", hostile, id="c_evil")]), Text("The key did not fit."))
    async with serve_api(db, openai_emulator.base_url) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("redos", tokens_per_day=1_000_000)
        body = {"question": "key?", "tools": [tool(parameters)["function"]]}
        async with http.post(f"{api.url}/api/answer/stream", json=body, headers=auth(secret)) as response:
            assert response.status == 200
            events = await read_sse(response)
    finished = [event.data for event in events if event.event == "tool_call_finished"]
    assert [(f["call_id"], f["status"]) for f in finished] == [("c_evil", "error")]
    assert "does not match" in finished[0]["output"]
    assert events[-1].event == "end"


async def test_the_tools_of_one_request_are_capped_in_number_and_in_schema_size(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    def named(index: int, parameters: dict[str, Any]) -> dict[str, Any]:
        return {"type": "function", "function": {"name": f"t{index}", "parameters": parameters}}

    wide = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 40} for i in range(800)}}
    async with serve_api(db, openai_emulator.base_url, max_body_bytes=1_000_000) as api:
        _, secret = await api.keys.create("many-tools", tokens_per_day=1_000_000)
        client = openai.AsyncOpenAI(base_url=api.v1, api_key=secret, max_retries=0)
        for tools, words in (([named(i, {"type": "object"}) for i in range(129)], "at most 128 tools"),
                             ([named(i, wide) for i in range(3)], "together may be at most")):
            with pytest.raises(openai.BadRequestError) as refused:
                await client.chat.completions.create(model="classic", messages=[{"role": "user", "content": "hi"}],
                                                     tools=tools)  # type: ignore[arg-type]
            assert refused.value.code == "invalid_tool" and words in refused.value.message
        await client.close()
    assert openai_emulator.chat_requests == []
