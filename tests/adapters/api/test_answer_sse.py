"""/api/answer and its SSE stream with a plain HTTP client: approvals, rejections, one resume, reconnects, bad input."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from core.store.db import Database
from tests.adapters.api.harness import Deploys, auth, read_sse, registry_with, serve_api
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls

DEPLOY = ToolCalls([Call("deploy", '{"target": "prod"}', id="call_deploy")], text="Let me deploy. ")


async def _pause(http: aiohttp.ClientSession, url: str, secret: str) -> tuple[str, list]:
    async with http.post(f"{url}/api/answer/stream", json={"question": "deploy prod"}, headers=auth(secret)) as response:
        assert response.status == 200 and response.headers["Content-Type"].startswith("text/event-stream")
        events = await read_sse(response)
    assert [e.event for e in events][-2:] == ["tool_calls_pending", "end"]
    end = events[-1].data
    assert end["pending_approval"]["calls"][0]["call_id"] == "call_deploy"
    return end["conversation_id"], events


async def test_a_paused_call_approved_through_tool_actions(db: Database, openai_emulator: OpenAIEmulator) -> None:
    deploys = Deploys()
    openai_emulator.script(DEPLOY, Text("Deployed to prod."))
    async with serve_api(db, openai_emulator.base_url, registry=registry_with(deploys)) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("sse")
        conversation, first = await _pause(http, api.url, secret)
        assert all(e.id and e.id.endswith(f":{n}") for n, e in enumerate(first, start=1))
        assert deploys.runs == []
        body = {"conversation_id": conversation, "tool_actions": [{"call_id": "call_deploy", "decision": "approve"}]}
        async with http.post(f"{api.url}/api/answer/stream", json=body, headers=auth(secret)) as response:
            events = await read_sse(response)
        kinds = [e.event for e in events]
        assert kinds[0] == "tool_call_started" and kinds[1] == "tool_call_finished" and kinds[-1] == "end"
        assert "".join(e.data["text"] for e in events if e.event == "answer_delta") == "Deployed to prod."
        assert events[-1].data["conversation_id"] == conversation and events[-1].data["usage"]["total_tokens"] > 0
        assert deploys.runs == [{"target": "prod"}]
        # A second continuation of the same pause is refused, clearly.
        async with http.post(f"{api.url}/api/answer/stream", json=body, headers=auth(secret)) as response:
            assert response.status == 409
            assert (await response.json())["error"]["type"] == "already_continued"


async def test_a_rejection_reaches_the_model_and_nothing_runs(db: Database, openai_emulator: OpenAIEmulator) -> None:
    deploys = Deploys()
    openai_emulator.script(DEPLOY, Text("Fine, not deploying."))
    async with serve_api(db, openai_emulator.base_url, registry=registry_with(deploys)) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("reject")
        conversation, _ = await _pause(http, api.url, secret)
        body = {"conversation_id": conversation,
                "tool_actions": [{"call_id": "call_deploy", "decision": "reject", "comment": "not today"}]}
        async with http.post(f"{api.url}/api/answer", json=body, headers=auth(secret)) as response:
            assert response.status == 200
            result = await response.json()
        assert result["tools"][0]["status"] == "rejected"
        assert result["final_answer"] == "Fine, not deploying." and result["conversation_id"] == conversation
        assert deploys.runs == []
        assert "not today" in json.dumps(openai_emulator.chat_requests[-1]["messages"])


async def test_two_concurrent_continuations_resume_once(db: Database, openai_emulator: OpenAIEmulator) -> None:
    deploys = Deploys()
    openai_emulator.script(DEPLOY, Text("Done once."))
    async with serve_api(db, openai_emulator.base_url, registry=registry_with(deploys)) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("race")
        conversation, _ = await _pause(http, api.url, secret)
        body = {"conversation_id": conversation, "tool_actions": [{"call_id": "call_deploy", "decision": "approve"}]}

        async def continue_() -> int:
            async with http.post(f"{api.url}/api/answer", json=body, headers=auth(secret)) as response:
                await response.read()
                return response.status

        statuses = sorted(await asyncio.gather(continue_(), continue_()))
        assert statuses == [200, 409]
        assert deploys.runs == [{"target": "prod"}]


async def test_reconnect_with_last_event_id_gets_the_rest(db: Database, openai_emulator: OpenAIEmulator) -> None:
    text = "one two three four five six seven eight nine ten"
    openai_emulator.script(Text(text, chunk_chars=4, delay_s=0.02))
    async with serve_api(db, openai_emulator.base_url) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("reconnect")
        async with http.post(f"{api.url}/api/answer/stream", json={"question": "count"}, headers=auth(secret)) as response:
            head = await read_sse(response, limit=3)
        # The client left mid-answer; the answer goes on, and the rest is there for it.
        headers = {**auth(secret), "Last-Event-ID": head[-1].id}
        async with http.post(f"{api.url}/api/answer/stream", json={}, headers=headers) as response:
            rest = await read_sse(response)
        seqs = [int(e.id.rsplit(":", 1)[1]) for e in head + rest]
        assert seqs == list(range(1, len(seqs) + 1))
        assert rest[-1].event == "end"
        assert "".join(e.data["text"] for e in head + rest if e.event == "answer_delta") == text
        # From the journal alone (as another process would read it): the same events.
        api.adapter.hub._streams.clear()
        async with http.post(f"{api.url}/api/answer/stream", json={}, headers=headers) as response:
            again = await read_sse(response)
        assert [(e.id, e.event, e.data) for e in again] == [(e.id, e.event, e.data) for e in rest]
        # Another key cannot read that stream.
        _, other = await api.keys.create("other")
        async with http.post(f"{api.url}/api/answer/stream", json={},
                             headers={**auth(other), "Last-Event-ID": head[-1].id}) as response:
            assert response.status == 404


async def test_bad_input_is_a_json_error_and_stores_nothing(db: Database, openai_emulator: OpenAIEmulator) -> None:
    deploys = Deploys()
    openai_emulator.script(DEPLOY)
    async with serve_api(db, openai_emulator.base_url, registry=registry_with(deploys), max_body_bytes=2048) as api, \
            aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("bad", requests_per_day=2)
        _, other = await api.keys.create("someone-else")
        url = f"{api.url}/api/answer"

        async def post(data: bytes | None = None, body: object = None, key: str = secret) -> tuple[int, dict]:
            kwargs = {"data": data} if data is not None else {"json": body}
            async with http.post(url, headers={**auth(key), "Content-Type": "application/json"}, **kwargs) as response:
                return response.status, await response.json()

        assert (await post(data=b"{nope"))[0] == 400
        assert (await post(body={"question": 5}))[0] == 400
        assert (await post(body=["question"]))[0] == 400
        assert (await post(body={"question": "x" * 5000}))[0] == 413
        assert (await post(body={"question": "hi", "agent": "nobody"}))[0] == 404
        assert (await post(body={"question": "hi", "conversation_id": "not-mine"}))[0] == 404
        status, error = await post(body={"question": "hi"}, key="rb-wrong")
        assert status == 401 and error["error"]["message"]
        # A real pause, then: someone else's continuation, and an unknown call id.
        conversation, _ = await _pause(http, api.url, secret)
        action = {"call_id": "call_deploy", "decision": "approve"}
        status, error = await post(body={"conversation_id": conversation, "tool_actions": [action]}, key=other)
        assert status == 404 and error["error"]["type"] == "conversation_not_found"
        status, error = await post(body={"conversation_id": conversation,
                                         "tool_actions": [{"call_id": "call_other", "decision": "approve"}]})
        assert status == 400 and error["error"]["type"] == "unknown_tool_call"
        assert (await post(body={"conversation_id": conversation,
                                 "tool_actions": [{"call_id": "call_deploy", "decision": "maybe"}]}))[0] == 400
        assert deploys.runs == []
        # Only the one request that ran was counted.
        key = next(k for k in await api.keys.list() if k.name == "bad")
        assert (await api.keys.used(key))[0] == 1
