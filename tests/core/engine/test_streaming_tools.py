"""Streaming text and tool calls through the engine: deltas, split and parallel calls, malformed arguments."""

from __future__ import annotations

import json

from core.events import Done, ToolCallFinished, ToolCallStarted
from core.store.db import Database
from tests.core.engine.support import (
    RecordingTool,
    answer_text,
    assert_valid_chat_request,
    events_of,
    last_done,
    registry_with,
    request,
    tool_messages,
)
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine

LONG_TEXT = "Streaming answers arrive piece by piece; " * 12


async def test_deltas_join_to_the_emulator_text_and_done_carries_it(db: Database, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(Text(LONG_TEXT, chunk_chars=3))
    events = await events_of(make_engine(db, openai_emulator.base_url), request("stream please"))
    deltas = [event for event in events if event.kind == "answer_delta"]
    assert len(deltas) > 50
    assert answer_text(events) == LONG_TEXT
    assert last_done(events).answer == LONG_TEXT
    # The run announces itself first (its id is what a Stop button names), then only text.
    assert [event.kind for event in events[:-1]] == ["run_started"] + ["answer_delta"] * len(deltas)


async def test_a_call_split_over_many_chunks_runs_with_its_whole_arguments(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(name="deploy")
    long_env = "production-eu-west-" + "x" * 60
    arguments = json.dumps({"env": long_env})
    assert len(arguments) > 40  # the emulator sends arguments 5 characters per chunk
    openai_emulator.script(ToolCalls([Call("deploy", arguments, id="call_a")]), Text("Done deploying."))
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    events = await events_of(engine, request("deploy it", channel="C-split"))
    assert tool.runs == [{"env": long_env}]
    started = [event for event in events if isinstance(event, ToolCallStarted)]
    assert started == [ToolCallStarted(call_id="call_a", tool="deploy", arguments={"env": long_env})]
    assert last_done(events).answer == "Done deploying."
    second = openai_emulator.chat_requests[1]
    assert_valid_chat_request(second)
    assert tool_messages(second) == {"call_a": f"deployed {long_env}"}
    assert [tool["function"]["name"] for tool in second["tools"]] == ["calculator", "current_time", "deploy"]


async def test_two_calls_in_one_turn_both_run_and_both_results_reach_the_model(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(name="deploy")
    openai_emulator.script(
        ToolCalls(
            [Call("deploy", '{"env": "staging"}', id="call_1"), Call("calculator", '{"expression": "6*7"}', id="call_2")],
            text="Let me check. ",
        ),
        Text("Staging is deployed and the answer is 42."),
    )
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    events = await events_of(engine, request("two things", channel="C-two"))
    assert tool.runs == [{"env": "staging"}]
    finished = {event.call_id: event for event in events if isinstance(event, ToolCallFinished)}
    assert finished["call_1"].status == "ok" and finished["call_2"].status == "ok"
    assert "42" in finished["call_2"].output_preview
    second = openai_emulator.chat_requests[1]
    assert_valid_chat_request(second)
    results = tool_messages(second)
    assert results["call_1"] == "deployed staging" and "42" in results["call_2"]
    assistant = [m for m in second["messages"] if m["role"] == "assistant"][-1]
    assert [call["id"] for call in assistant["tool_calls"]] == ["call_1", "call_2"]
    done = last_done(events)
    assert done.answer == "Let me check. Staging is deployed and the answer is 42."
    assert answer_text(events) == done.answer


async def test_malformed_arguments_reach_the_model_as_an_error_and_the_run_continues(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(name="deploy")
    openai_emulator.script(
        ToolCalls([Call("deploy", '{"env": "prod"', id="call_bad")]),
        ToolCalls([Call("deploy", '{"env": "prod"}', id="call_good")]),
        Text("Fixed and deployed."),
    )
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    events = await events_of(engine, request("deploy prod", channel="C-bad"))
    errors = [event for event in events if isinstance(event, ToolCallFinished) and event.status == "error"]
    assert [event.call_id for event in errors] == ["call_bad"]
    assert "not valid JSON" in errors[0].output_preview
    second = openai_emulator.chat_requests[1]
    assert_valid_chat_request(second)
    assert "not valid JSON" in tool_messages(second)["call_bad"]
    assert tool.runs == [{"env": "prod"}]
    assert isinstance(events[-1], Done) and events[-1].answer == "Fixed and deployed."
    assert_valid_chat_request(openai_emulator.chat_requests[2])
