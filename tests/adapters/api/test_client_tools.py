"""Agent mode: client-executed tools and confirmed server tools, over /v1 (official openai client) and /api/answer (SSE)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import openai

from core.store.db import Database
from tests.adapters.api.harness import Deploys, auth, read_sse, registry_with, serve_api
from tests.emulators.openai_server import JSON, Call, OpenAIEmulator, Text, ToolCalls

WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The weather in a city, from the client's own service.",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
}
ASK_WEATHER = ToolCalls([Call("get_weather", '{"city": "Paris"}', id="model_call_1")], text="Checking. ")
DEPLOY = ToolCalls([Call("deploy", '{"target": "prod"}', id="call_deploy")])


def _tool_message(request_body: dict, call_id: str) -> dict:
    return next(m for m in request_body["messages"] if m.get("role") == "tool" and m["tool_call_id"] == call_id)


async def test_async_client_tool_round_trip(db: Database, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(ASK_WEATHER, Text("It is sunny in Paris."))
    async with serve_api(db, openai_emulator.base_url) as api:
        key, secret = await api.keys.create("agent", tokens_per_day=1_000_000)
        client = openai.AsyncOpenAI(base_url=api.v1, api_key=secret, max_retries=0)
        messages: list = [{"role": "user", "content": "weather in Paris?"}]
        first = await client.chat.completions.create(model="classic", messages=messages, tools=[WEATHER])
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        call = choice.message.tool_calls[0]
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
        # The model was offered the client's tool alongside the server's own.
        offered = {t["function"]["name"] for t in openai_emulator.chat_requests[0]["tools"]}
        assert "get_weather" in offered and "calculator" in offered
        # The paused run's tokens already count toward the key's day.
        paused_tokens = (await api.keys.used(key))[1]
        assert paused_tokens == first.usage.total_tokens > 0

        messages += [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 °C"}]
        second = await client.chat.completions.create(model="classic", messages=messages, tools=[WEATHER])
        assert second.choices[0].finish_reason == "stop"
        assert choice.message.content == "Checking. "
        # Only what was written after the results (the text before the call came with the call).
        assert second.choices[0].message.content == "It is sunny in Paris."
        # The model read the client's result as the tool's output, under its own call id.
        assert _tool_message(openai_emulator.chat_requests[1], "model_call_1")["content"] == "sunny, 24 °C"
        # Counted once each: the resumed run adds only its own tokens.
        assert (await api.keys.used(key))[1] == second.usage.total_tokens > paused_tokens
        await client.close()


async def test_sync_client_confirms_a_server_tool_which_runs_once(db: Database, openai_emulator: OpenAIEmulator) -> None:
    deploys = Deploys()
    openai_emulator.script(DEPLOY, Text("Deployed to prod."))
    async with serve_api(db, openai_emulator.base_url, registry=registry_with(deploys)) as api:
        _, secret = await api.keys.create("confirm")

        def converse() -> tuple[str, str, str, str]:
            with openai.OpenAI(base_url=api.v1, api_key=secret, max_retries=0) as client:
                messages: list = [{"role": "user", "content": "deploy prod"}]
                first = client.chat.completions.create(model="classic", messages=messages, tools=[WEATHER])
                call = first.choices[0].message.tool_calls[0]
                assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "deploy"
                messages += [first.choices[0].message.model_dump(exclude_none=True),
                             {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"approve": True})}]
                # Streamed, through the SDK's stream reader.
                streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
                    model="classic", messages=messages, tools=[WEATHER], stream=True) if chunk.choices)
                # The same request again (a retry after a lost response): the stored reply, the tool not run again.
                again = client.chat.completions.create(model="classic", messages=messages, tools=[WEATHER])
                again_streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
                    model="classic", messages=messages, tools=[WEATHER], stream=True) if chunk.choices)
            return call.id, streamed, again.choices[0].message.content or "", again_streamed

        call_id, streamed, again, again_streamed = await asyncio.to_thread(converse)
        assert streamed == again == again_streamed == "Deployed to prod."
        assert deploys.runs == [{"target": "prod"}]
        assert len(openai_emulator.chat_requests) == 2
        # Even from the journal alone (as another process would read it).
        api.adapter.hub._streams.clear()
        client = openai.AsyncOpenAI(base_url=api.v1, api_key=secret, max_retries=0)
        messages = [{"role": "user", "content": "deploy prod"},
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": call_id, "type": "function", "function": {"name": "deploy", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": call_id, "content": '{"approve": true}'}]
        replay = await client.chat.completions.create(model="classic", messages=messages, tools=[WEATHER])
        assert replay.choices[0].message.content == "Deployed to prod."
        # Another key cannot answer (or read) this key's calls.
        _, other = await api.keys.create("other")
        stranger = openai.AsyncOpenAI(base_url=api.v1, api_key=other, max_retries=0)
        try:
            await stranger.chat.completions.create(model="classic", messages=messages, tools=[WEATHER])
            raise AssertionError("another key continued the run")
        except openai.BadRequestError as error:
            assert error.code == "unknown_tool_call"
        await stranger.close()
        await client.close()
        assert deploys.runs == [{"target": "prod"}]


async def test_a_rejected_confirmation_and_bad_answers(db: Database, openai_emulator: OpenAIEmulator) -> None:
    deploys = Deploys()
    openai_emulator.script(DEPLOY, Text("Not deploying, then."))
    async with serve_api(db, openai_emulator.base_url, registry=registry_with(deploys)) as api:
        _, secret = await api.keys.create("reject")
        client = openai.AsyncOpenAI(base_url=api.v1, api_key=secret, max_retries=0)
        messages: list = [{"role": "user", "content": "deploy prod"}]
        first = await client.chat.completions.create(model="classic", messages=messages, tools=[WEATHER])
        call = first.choices[0].message.tool_calls[0]
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        # A server tool answered with something other than a confirmation: refused, nothing decided.
        try:
            await client.chat.completions.create(
                model="classic", tools=[WEATHER],
                messages=[*messages, {"role": "tool", "tool_call_id": call.id, "content": "sure"}])
            raise AssertionError("a non-confirmation was taken")
        except openai.BadRequestError as error:
            assert error.code == "decision_required"
        # A client tool named like a server tool is refused before anything runs.
        try:
            await client.chat.completions.create(
                model="classic", messages=[{"role": "user", "content": "hi"}],
                tools=[{"type": "function", "function": {"name": "deploy", "parameters": {"type": "object"}}}])
            raise AssertionError("a clashing tool name was taken")
        except openai.BadRequestError as error:
            assert error.code == "invalid_tool"
        reply = await client.chat.completions.create(
            model="classic", tools=[WEATHER],
            messages=[*messages, {"role": "tool", "tool_call_id": call.id,
                                  "content": json.dumps({"approve": False, "comment": "not on a Friday"})}])
        assert reply.choices[0].message.content == "Not deploying, then."
        assert deploys.runs == []
        assert "not on a Friday" in json.dumps(openai_emulator.chat_requests[-1]["messages"])
        await client.close()


async def test_without_tools_a_confirmation_is_not_asked_for(db: Database, openai_emulator: OpenAIEmulator) -> None:
    deploys = Deploys()
    openai_emulator.script(DEPLOY)
    async with serve_api(db, openai_emulator.base_url, registry=registry_with(deploys)) as api:
        _, secret = await api.keys.create("plain")
        client = openai.AsyncOpenAI(base_url=api.v1, api_key=secret, max_retries=0)
        reply = await client.chat.completions.create(model="classic", messages=[{"role": "user", "content": "deploy"}])
        assert reply.choices[0].finish_reason == "stop" and not reply.choices[0].message.tool_calls
        assert "/api/answer" in (reply.choices[0].message.content or "")
        assert deploys.runs == []
        await client.close()


async def test_response_format_passes_through_where_supported(db: Database, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(JSON({"city": "Paris"}), Text("plain"))
    schema = {"type": "json_schema", "json_schema": {"name": "place", "schema": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    overrides = {"supports_structured_output": True}
    async with serve_api(db, openai_emulator.base_url, llm_model_overrides=overrides) as api:
        _, secret = await api.keys.create("json")
        client = openai.AsyncOpenAI(base_url=api.v1, api_key=secret, max_retries=0)
        reply = await client.chat.completions.create(
            model="classic", messages=[{"role": "user", "content": "where?"}], response_format=schema)  # type: ignore[arg-type]
        assert json.loads(reply.choices[0].message.content or "") == {"city": "Paris"}
        assert openai_emulator.chat_requests[0]["response_format"] == schema
        try:
            await client.chat.completions.create(model="classic", messages=[{"role": "user", "content": "x"}],
                                                 response_format={"type": "yaml"})  # type: ignore[arg-type]
            raise AssertionError("an unknown format was taken")
        except openai.BadRequestError:
            pass
        await client.close()


async def test_sse_client_tool_result(db: Database, openai_emulator: OpenAIEmulator) -> None:
    deploys = Deploys()
    openai_emulator.script(ToolCalls([Call("get_weather", '{"city": "Oslo"}', id="w1"),
                                      Call("deploy", '{"target": "prod"}', id="d1")]),
                           Text("Oslo is snowy; deployed."))
    async with serve_api(db, openai_emulator.base_url, registry=registry_with(deploys)) as api, \
            aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("sse-tools")
        body = {"question": "weather in Oslo, then deploy", "tools": [WEATHER["function"]]}
        async with http.post(f"{api.url}/api/answer/stream", json=body, headers=auth(secret)) as response:
            events = await read_sse(response)
        assert [e.event for e in events][-2:] == ["tool_calls_pending", "end"]
        end = events[-1].data
        calls = {c["call_id"]: c for c in end["pending_approval"]["calls"]}
        assert calls["w1"]["client"] is True and calls["d1"]["client"] is False
        conversation = end["conversation_id"]
        url = f"{api.url}/api/answer/stream"

        async def post(actions: list) -> aiohttp.ClientResponse:
            return await http.post(url, json={"conversation_id": conversation, "tool_actions": actions},
                                   headers=auth(secret))

        # A result for the server's tool, or a decision without a result for the client's: refused.
        for actions, kind in (([{"call_id": "w1", "result": "snow"}, {"call_id": "d1", "result": "done"}],
                               "decision_required"),
                              ([{"call_id": "w1", "decision": "approve"}, {"call_id": "d1", "decision": "approve"}],
                               "result_required")):
            async with await post(actions) as response:
                assert response.status == 400 and (await response.json())["error"]["type"] == kind
        async with await post([{"call_id": "w1", "result": {"sky": "snow", "c": -3}},
                               {"call_id": "d1", "decision": "approve"}]) as response:
            assert response.status == 200
            resumed = await read_sse(response)
        finished = [e.data for e in resumed if e.event == "tool_call_finished"]
        assert {(f["call_id"], f["status"]) for f in finished} == {("w1", "ok"), ("d1", "ok")}
        assert not any(e.data["call_id"] == "w1" for e in resumed if e.event == "tool_call_started")
        assert "".join(e.data["text"] for e in resumed if e.event == "answer_delta") == "Oslo is snowy; deployed."
        assert resumed[-1].event == "end"
        assert json.loads(_tool_message(openai_emulator.chat_requests[-1], "w1")["content"]) == {"sky": "snow", "c": -3}
        assert deploys.runs == [{"target": "prod"}]
