"""Stop: the asker (or an approver) stops a run in this process or another; the turn keeps what was shown, marked stopped."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from core.engine import Engine
from core.events import AnswerDelta, Event, RunStarted, Stopped
from core.requests import Actor
from core.store.db import Database
from core.tools import ToolContext, ToolSpec
from tests.core.engine.support import ENV_SCHEMA, RecordingTool, assert_valid_chat_request, events_of, last_done, registry_with, request
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine

ADA = Actor(id="U1", name="Ada")
BOB = Actor(id="U2", name="Bob")
SLOW = Text("word " * 400, chunk_chars=5, delay_s=0.02)


async def outcome_of(db: Database, run_id: str) -> tuple[str | None, str | None]:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT outcome, stop_by FROM run_stops WHERE run_id = %s", (uuid.UUID(run_id),))
        row = await cursor.fetchone()
    assert row is not None
    return row[0], row[1]


async def play_until_text(engine: Engine, channel: str, stopper: Engine | None = None, by: Actor = ADA) -> list[Event]:
    """Asks, and once some text was shown asks `stopper` (default: the same engine) to stop the run."""
    events: list[Event] = []
    run_id = ""
    async for event in engine.ask(request("tell me a long story", channel=channel)):
        events.append(event)
        if isinstance(event, RunStarted):
            run_id = event.run_id
        if isinstance(event, AnswerDelta) and len(events) == 4:
            result = await (stopper or engine).runs.stop(run_id, actor=by)
            assert result.outcome == "stopping", result
    return events


async def test_the_asker_stops_a_streaming_answer_and_history_keeps_what_was_shown(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    engine = make_engine(db, openai_emulator.base_url)
    openai_emulator.script(SLOW)
    events = await play_until_text(engine, "C-stop")
    started = events[0]
    assert isinstance(started, RunStarted) and started.asked_by == "U1"
    stopped = events[-1]
    assert isinstance(stopped, Stopped) and stopped.by == "Ada" and stopped.message == "⏹ Stopped by Ada."
    shown = "".join(e.text for e in events if isinstance(e, AnswerDelta))
    assert 0 < len(shown) < len(SLOW.text)
    assert await outcome_of(db, started.run_id) == ("stopped", "Ada")

    # A click after the end is told so; the next question sees the stopped answer in its history.
    late = await engine.runs.stop(started.run_id, actor=ADA)
    assert late.outcome == "ended" and "already finished" in late.message
    openai_emulator.script(Text("ok"))
    assert last_done(await events_of(engine, request("go on", channel="C-stop"))).answer == "ok"
    body = openai_emulator.chat_requests[-1]
    assert_valid_chat_request(body)
    assistant = [m for m in body["messages"] if m["role"] == "assistant"][-1]
    assert assistant["content"] == f"{shown.strip()}\n\n⏹ Stopped by Ada."


async def test_only_the_asker_an_approver_or_an_admin_may_stop(db: Database, openai_emulator: OpenAIEmulator) -> None:
    engine = make_engine(db, openai_emulator.base_url, approvers=["U9"])
    openai_emulator.script(SLOW)
    refusals: list[str] = []
    run_ids: list[str] = []
    async for event in engine.ask(request("tell me a long story", channel="C-who")):
        if isinstance(event, RunStarted):
            run_ids.append(event.run_id)
            refused = await engine.runs.stop(event.run_id, actor=BOB)
            assert refused.outcome == "refused"
            refusals.append(refused.message)
            assert (await engine.runs.stop(event.run_id, actor=Actor(id="U9", name="Approver"))).outcome == "stopping"
            again = await engine.runs.stop(event.run_id, actor=ADA)
            assert again.outcome == "already_stopping" and "Approver" in again.message
        last = event
    assert isinstance(last, Stopped) and last.by == "Approver"
    assert refusals == ["Only U1 (who asked), U9 or an admin can stop this answer."]
    assert (await engine.runs.stop(str(uuid.uuid4()), actor=ADA)).outcome == "not_found"
    assert (await engine.runs.stop("not-a-run", actor=ADA)).outcome == "not_found"


async def test_a_tool_not_started_never_starts_and_the_one_running_is_cut_off(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    started = asyncio.Event()

    async def wait_forever(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    deploy = RecordingTool()
    registry = registry_with(deploy)
    registry.register(ToolSpec(name="slow", description="slow", parameters=ENV_SCHEMA, run=wait_forever))
    engine = make_engine(db, openai_emulator.base_url, registry=registry)
    openai_emulator.script(
        ToolCalls([Call("slow", '{"env": "a"}', id="call_slow"), Call("deploy", '{"env": "b"}', id="call_deploy")]),
        Text("never asked"),
    )
    events: list[Event] = []

    async def stop_once_running(run_id: str) -> None:
        await started.wait()
        assert (await engine.runs.stop(run_id, actor=ADA)).outcome == "stopping"

    stopper: asyncio.Task[None] | None = None
    async for event in engine.ask(request("slow then deploy", channel="C-tools")):
        events.append(event)
        if isinstance(event, RunStarted):
            stopper = asyncio.create_task(stop_once_running(event.run_id))
    assert stopper is not None
    await stopper
    assert isinstance(events[-1], Stopped) and started.is_set()
    assert deploy.runs == []
    assert len(openai_emulator.chat_requests) == 1

    openai_emulator.script(Text("ok"))
    await events_of(engine, request("what happened?", channel="C-tools"))
    body = openai_emulator.chat_requests[-1]
    assert_valid_chat_request(body)
    results = {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}
    assert set(results) == {"call_slow", "call_deploy"}
    assert [m for m in body["messages"] if m["role"] == "assistant"][-1]["content"] == "⏹ Stopped by Ada."


async def test_a_stop_clicked_in_another_process_stops_the_run(db: Database, openai_emulator: OpenAIEmulator) -> None:
    running = make_engine(db, openai_emulator.base_url)
    elsewhere = make_engine(db, openai_emulator.base_url)
    story = "word " * 2000  # 40 s to stream: only the stop ends it early
    openai_emulator.script(Text(story, chunk_chars=5, delay_s=0.02))
    events = await play_until_text(running, "C-far", stopper=elsewhere)
    assert isinstance(events[-1], Stopped) and events[-1].by == "Ada"
    assert len("".join(e.text for e in events if isinstance(e, AnswerDelta))) < len(story) // 4
