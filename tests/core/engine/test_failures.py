"""Model failures, the loop limit, unknown agent types and per-conversation serialisation."""

from __future__ import annotations

import asyncio

import pytest

from core.events import Done, Event
from core.store.db import Database
from tests.core.engine.support import (
    RecordingTool,
    assert_valid_chat_request,
    events_of,
    last_done,
    last_failed,
    registry_with,
    request,
)
from tests.emulators.openai_server import Call, Fault, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine


@pytest.mark.parametrize(
    ("faults", "words"),
    [
        ((Fault("500"), Fault("500"), Fault("500")), ("internal error",)),
        ((Fault("stall", text="Half an answ"),), ("stopped responding for 0.3 seconds",)),
        ((Fault("cut", text="Half an answ"),), ("cut off",)),
    ],
    ids=["500", "stall", "cut"],
)
async def test_a_failing_model_ends_in_a_clear_sentence_and_history_stays_intact(
    faults: tuple[Fault, ...], words: tuple[str, ...], db: Database, openai_emulator: OpenAIEmulator
) -> None:
    engine = make_engine(db, openai_emulator.base_url, llm_idle_timeout_s=0.3)
    channel = f"C-fault-{faults[0].kind}"
    openai_emulator.script(Text("Fine answer."))
    await events_of(engine, request("warm up", channel=channel))
    openai_emulator.script(*faults)
    events = await events_of(engine, request("the failing question", channel=channel))
    failed = last_failed(events)
    assert any(word in failed.message.lower() for word in words), failed.message
    assert failed.message.endswith(".") and "try again" in failed.message.lower() and failed.retryable
    assert not any(isinstance(event, Done) for event in events)

    openai_emulator.script(Text("Recovered."))
    after = await events_of(engine, request("next question", channel=channel))
    assert last_done(after).answer == "Recovered."
    body = openai_emulator.chat_requests[-1]
    assert_valid_chat_request(body)
    contents = [m["content"] for m in body["messages"][1:]]
    assert contents == ["warm up", "Fine answer.", "the failing question", "next question"]


async def test_a_model_that_always_calls_tools_hits_the_loop_limit(db: Database, openai_emulator: OpenAIEmulator) -> None:
    tool = RecordingTool()
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool), agent_loop_limit=2)
    openai_emulator.script_fn(lambda body: ToolCalls([Call("deploy", '{"env": "loop"}')]))
    events = await events_of(engine, request("loop forever", channel="C-loop"))
    failed = last_failed(events)
    assert "stopped after 2 rounds" in failed.message
    assert len(openai_emulator.chat_requests) == 2 and len(tool.runs) == 2


async def test_an_unknown_agent_type_fails_with_a_clear_sentence(db: Database, openai_emulator: OpenAIEmulator) -> None:
    engine = make_engine(db, openai_emulator.base_url)
    events = await events_of(engine, request("hi", channel="C-unknown", agent_type="wizard"))
    assert len(events) == 1
    failed = last_failed(events)
    assert failed.message == "Unknown agent type 'wizard'; use one of agentic, classic, react, research."
    assert openai_emulator.chat_requests == []


async def test_two_quick_messages_in_one_conversation_are_serialised(db: Database, openai_emulator: OpenAIEmulator) -> None:
    tool = RecordingTool()
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    openai_emulator.script(
        ToolCalls([Call("deploy", '{"env": "one"}', id="call_one")]),
        Text("First done.", chunk_chars=2, delay_s=0.01),
        Text("Second done."),
    )

    async def run(question: str) -> list[Event]:
        return await events_of(engine, request(question, channel="C-serial"))

    first = asyncio.create_task(run("first message"))
    await asyncio.sleep(0)
    second = asyncio.create_task(run("second message"))
    first_events, second_events = await asyncio.gather(first, second)
    assert last_done(first_events).answer == "First done."
    assert last_done(second_events).answer == "Second done."
    assert len(openai_emulator.chat_requests) == 3
    body = openai_emulator.chat_requests[2]
    assert_valid_chat_request(body)
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert body["messages"][1]["content"] == "first message" and body["messages"][-1]["content"] == "second message"
