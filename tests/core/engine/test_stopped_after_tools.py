"""Once an approved call started, the turn keeps it whatever stops the run: a model failure, a shutdown, a database blip."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

from core.approvals import Click
from core.engine import Engine
from core.events import AnswerDelta, Event, Failed
from core.requests import Actor
from core.store.db import Database
from core.tools import ToolContext, ToolSpec
from tests.core.engine.support import (
    ENV_SCHEMA,
    RecordingTool,
    approval,
    assert_valid_chat_request,
    events_of,
    last_done,
    last_failed,
    registry_with,
    request,
    resumed_run,
    tool_messages,
)
from tests.emulators.openai_server import Call, Fault, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine

ADA = Actor(id="U1", name="Ada")
SLOW_REPLY = Text("x" * 400, chunk_chars=4, delay_s=0.02)


def deploy_calls(*envs: str) -> ToolCalls:
    return ToolCalls([Call("deploy", f'{{"env": "{env}"}}', id=f"call_{env}") for env in envs])


async def approved(engine: Engine, emulator: OpenAIEmulator, *replies: Any, channel: str) -> str:
    """A run paused on deploy calls, every call approved by the requester; returns the continuation id."""
    emulator.script(*replies)
    continuation_id = approval(await events_of(engine, request("please deploy", channel=channel))).continuation_id
    assert (await engine.approvals.decide(Click(
        continuation_id=continuation_id, call_id=None, approved=True, actor=ADA,
    ))).outcome == "ready"
    return continuation_id


async def status_of(db: Database, continuation_id: str) -> str:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT status FROM continuations WHERE id = %s", (uuid.UUID(continuation_id),))
        row = await cursor.fetchone()
    assert row is not None
    return str(row[0])


async def next_question_body(engine: Engine, emulator: OpenAIEmulator, channel: str) -> dict[str, Any]:
    emulator.script(Text("Noted."))
    assert last_done(await events_of(engine, request("what happened?", channel=channel))).answer == "Noted."
    body = emulator.chat_requests[-1]
    assert_valid_chat_request(body)
    return body


async def test_a_model_failure_after_an_approved_deploy_keeps_the_deploy_and_says_it_ran(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    continuation_id = await approved(
        engine, openai_emulator, deploy_calls("prod"), Fault("500"), Fault("500"), Fault("500"), channel="C-500"
    )

    after = [event async for event in resumed_run(engine, continuation_id, actor=ADA)]
    assert tool.runs == [{"env": "prod"}]
    failed = last_failed(after)
    assert failed.message.startswith("`deploy` ran (ok: deployed prod); then I had to stop: ")
    assert "internal error" in failed.message and failed.message.endswith("Ask me to continue rather than to run it again.")
    assert "try again" not in failed.message.lower() and not failed.retryable

    # The continuation is closed: no click can run the deploy a second time.
    assert await status_of(db, continuation_id) == "failed"
    again = [event async for event in resumed_run(engine, continuation_id, actor=ADA)]
    assert len(again) == 1 and isinstance(again[0], Failed) and tool.runs == [{"env": "prod"}]

    body = await next_question_body(engine, openai_emulator, "C-500")
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert body["messages"][1]["content"] == "please deploy"
    assert body["messages"][2]["tool_calls"][0]["function"] == {"name": "deploy", "arguments": '{"env": "prod"}'}
    assert tool_messages(body) == {"call_prod": "deployed prod"}
    assert body["messages"][4]["content"] == failed.message


async def test_a_failure_with_nothing_approved_still_keeps_the_question_alone(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    openai_emulator.script(deploy_calls("prod"), Fault("500"), Fault("500"), Fault("500"))
    continuation_id = approval(await events_of(engine, request("please deploy", channel="C-rej"))).continuation_id
    assert (await engine.approvals.decide(Click(
        continuation_id=continuation_id, call_id=None, approved=False, actor=ADA,
    ))).outcome == "ready"
    after = [event async for event in resumed_run(engine, continuation_id, actor=ADA)]
    failed = last_failed(after)
    assert "ran" not in failed.message and "try again" in failed.message.lower()
    assert tool.runs == [] and await status_of(db, continuation_id) == "pending"
    body = await next_question_body(engine, openai_emulator, "C-rej")
    assert [m["content"] for m in body["messages"][1:]] == ["please deploy", "what happened?"]


async def test_a_run_cancelled_after_the_approved_call_ran_stores_it(db: Database, openai_emulator: OpenAIEmulator) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    continuation_id = await approved(engine, openai_emulator, deploy_calls("prod"), SLOW_REPLY, channel="C-cancel")
    answering = asyncio.Event()

    async def play() -> None:
        async for event in resumed_run(engine, continuation_id, actor=ADA):
            if isinstance(event, AnswerDelta):
                answering.set()

    task = asyncio.create_task(play())
    await answering.wait()
    task.cancel()  # as shutdown does, after the deploy, while the model is still answering
    try:
        await task
    except asyncio.CancelledError:
        pass

    assert tool.runs == [{"env": "prod"}]
    assert await status_of(db, continuation_id) == "failed"
    body = await next_question_body(engine, openai_emulator, "C-cancel")
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert tool_messages(body) == {"call_prod": "deployed prod"}


async def test_a_run_its_consumer_stops_reading_after_the_call_ran_stores_it(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    continuation_id = await approved(engine, openai_emulator, deploy_calls("prod"), SLOW_REPLY, channel="C-close")
    result = await engine.approvals.submit(continuation_id, {}, actor=ADA)
    assert result.events is not None
    events: AsyncIterator[Event] = result.events
    async for event in events:
        if isinstance(event, AnswerDelta):
            break
    await events.aclose()  # what the shared runner does when an interrupted answer stops playing
    # Closed through every layer at once, not whenever the garbage collector gets to it: the run
    # has ended (and stored what ran) by the time aclose returns.
    assert engine.active_runs == 0

    assert tool.runs == [{"env": "prod"}]
    assert await status_of(db, continuation_id) == "failed"
    body = await next_question_body(engine, openai_emulator, "C-close")
    assert tool_messages(body) == {"call_prod": "deployed prod"}


@dataclass
class BlockingTool:
    """`deploy` that finishes at once for prod and blocks for any other environment until cancelled."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    blocked: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> str:
        self.runs.append(arguments)
        if arguments["env"] != "prod":
            self.blocked.set()
            await asyncio.Event().wait()
        return f"deployed {arguments['env']}"

    def spec(self) -> ToolSpec:
        return ToolSpec(name="deploy", description="Run deploy", parameters=ENV_SCHEMA, run=self.run, requires_approval=True)


async def test_a_run_cancelled_between_two_approved_calls_stores_the_first_and_says_the_second_is_unknown(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = BlockingTool()
    registry = registry_with()
    registry.register(tool.spec())
    engine = make_engine(db, openai_emulator.base_url, registry=registry, tool_timeout_s=60)
    continuation_id = await approved(engine, openai_emulator, deploy_calls("prod", "eu", "us"), channel="C-mid")

    async def play() -> None:
        async for _ in resumed_run(engine, continuation_id, actor=ADA):
            pass

    task = asyncio.create_task(play())
    await tool.blocked.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass

    assert tool.runs == [{"env": "prod"}, {"env": "eu"}]
    assert await status_of(db, continuation_id) == "failed"
    body = await next_question_body(engine, openai_emulator, "C-mid")
    results = tool_messages(body)
    assert results["call_prod"] == "deployed prod"
    assert "outcome is unknown" in results["call_eu"]
    assert "did not run" in results["call_us"]


@dataclass
class BlipTool:
    """`deploy` after which the database drops every connection, as a blip would."""

    database_url: str
    runs: list[dict[str, Any]] = field(default_factory=list)

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> str:
        self.runs.append(arguments)
        with psycopg.connect(self.database_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        return "deployed"

    def spec(self) -> ToolSpec:
        return ToolSpec(name="deploy", description="Run deploy", parameters=ENV_SCHEMA, run=self.run, requires_approval=True)


async def test_a_database_blip_after_the_approved_call_does_not_lose_it(
    db: Database, openai_emulator: OpenAIEmulator, database_url: str
) -> None:
    tool = BlipTool(database_url)
    registry = registry_with()
    registry.register(tool.spec())
    engine = make_engine(db, openai_emulator.base_url, registry=registry)
    continuation_id = await approved(engine, openai_emulator, deploy_calls("prod"), Text("Deployed."), channel="C-blip")

    after = [event async for event in resumed_run(engine, continuation_id, actor=ADA)]
    assert last_done(after).answer == "Deployed." and tool.runs == [{"env": "prod"}]
    body = await next_question_body(engine, openai_emulator, "C-blip")
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert tool_messages(body) == {"call_prod": "deployed"}
