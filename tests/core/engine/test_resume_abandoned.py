"""A resumed run that ends before any approved call started keeps its approval: the next click resumes it."""

from __future__ import annotations

import asyncio
import uuid

from core.approvals import Click
from core.events import AnswerDelta, Done, ToolCallFinished
from core.requests import Actor
from core.store.db import Database
from tests.core.engine.support import resumed_run, RecordingTool, approval, events_of, registry_with, request
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine

ADA = Actor(id="U1", name="Ada")
POLLS = 200


async def status_of(db: Database, continuation_id: str) -> str:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT status FROM continuations WHERE id = %s", (uuid.UUID(continuation_id),))
        row = await cursor.fetchone()
    assert row is not None
    return str(row[0])


async def test_a_resume_cancelled_while_waiting_for_the_conversation_keeps_the_approval(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    openai_emulator.script(
        ToolCalls([Call("deploy", '{"env": "prod"}', id="call_dep")]),
        Text("x" * 400, chunk_chars=4, delay_s=0.02),
        Text("Deployed."),
    )
    continuation_id = approval(await events_of(engine, request("please deploy", channel="C-abandon"))).continuation_id
    assert (await engine.approvals.decide(Click(
        continuation_id=continuation_id, call_id="call_dep", approved=True, actor=ADA,
    ))).outcome == "ready"

    # Another question in the same conversation holds it while the resume waits its turn.
    busy = engine.ask(request("something slow", channel="C-abandon"))
    assert (await anext(busy)).kind == "run_started"
    assert isinstance(await anext(busy), AnswerDelta)

    async def resume() -> list[object]:
        return [event async for event in resumed_run(engine, continuation_id, actor=ADA)]

    waiting = asyncio.create_task(resume())
    for _ in range(POLLS):
        if await status_of(db, continuation_id) == "resuming":
            break
        await asyncio.sleep(0.01)
    assert await status_of(db, continuation_id) == "resuming"
    waiting.cancel()
    try:
        await waiting
    except asyncio.CancelledError:
        pass
    rest = [event async for event in busy]
    assert isinstance(rest[-1], Done)

    assert tool.runs == []
    assert await status_of(db, continuation_id) == "pending"
    again = [event async for event in resumed_run(engine, continuation_id, actor=ADA)]
    assert [e.status for e in again if isinstance(e, ToolCallFinished)] == ["ok"]
    assert isinstance(again[-1], Done) and again[-1].answer == "Deployed."
    assert tool.runs == [{"env": "prod"}]
