"""MCP tools through the engine, with a real MCP server (the `mcp` SDK) over stdio and streamable HTTP:
listed to the model, read-only ones trusted, write ones approved and run once, and a server that dies
takes its tools away without failing an answer, and gives them back when it returns."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from core.engine import Engine
from core.events import Done, Event, ToolCallFinished, ToolCallStarted
from core.requests import Actor
from core.store.db import Database
from core.tools import builtin_registry
from core.tools.mcp.config import parse_servers
from core.tools.mcp.tools import McpTools
from tests.core.engine.support import approval, events_of, last_done, request, resumed_run, tool_messages
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine
from tests.support.mcp import FAST, FixtureServer, until
from tests.support.processes import free_port

REQUESTER = Actor(id="U1", name="Ada")
SERVER_TOOLS = {"test__lookup", "test__append_note", "test__slow", "test__enable_extra"}


@pytest.fixture(params=["stdio", "http"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[FixtureServer]:
    fixture = FixtureServer(transport=request.param, workdir=tmp_path)
    await fixture.start()
    yield fixture
    fixture.stop()


async def connected(server: FixtureServer, **options: Any) -> McpTools:
    options.setdefault("call_timeout_s", 10.0)
    options.setdefault("trust_read_only_hint", True)
    mcp = McpTools(parse_servers({"test": server.entry()}), **FAST, **options)
    await mcp.start(wait_s=20)
    assert set(mcp.specs()) == SERVER_TOOLS, mcp.servers()
    return mcp


@pytest.fixture
async def mcp(server: FixtureServer) -> AsyncIterator[McpTools]:
    tools = await connected(server)
    yield tools
    await tools.close()


def engine_over(db: Database, emulator: OpenAIEmulator, mcp: McpTools) -> Engine:
    registry = builtin_registry()
    registry.add_provider(mcp)
    return make_engine(db, emulator.base_url, registry=registry, approval_layers=mcp.approval_layers())


def offered(body: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in body.get("tools", [])}


def finished(events: list[Event]) -> list[ToolCallFinished]:
    return [event for event in events if isinstance(event, ToolCallFinished)]


async def test_tools_are_offered_and_a_trusted_read_only_tool_runs_without_approval(
    db: Database, openai_emulator: OpenAIEmulator, server: FixtureServer, mcp: McpTools
) -> None:
    engine = engine_over(db, openai_emulator, mcp)
    openai_emulator.script(ToolCalls([Call("test__lookup", '{"key": "colour"}', id="call_look")]), Text("It is blue."))
    events = await events_of(engine, request("what colour?", channel=f"C-ro-{server.transport}"))
    assert last_done(events).answer == "It is blue."
    assert [event.tool for event in events if isinstance(event, ToolCallStarted)] == ["test__lookup"]
    assert [(event.status, event.output_preview) for event in finished(events)] == [("ok", "value of colour")]
    first = openai_emulator.chat_requests[0]
    assert SERVER_TOOLS | {"calculator", "current_time"} <= offered(first)
    assert tool_messages(openai_emulator.chat_requests[-1]) == {"call_look": "value of colour"}


async def test_a_write_tool_pauses_for_approval_and_runs_once_after_approve(
    db: Database, openai_emulator: OpenAIEmulator, server: FixtureServer, mcp: McpTools
) -> None:
    engine = engine_over(db, openai_emulator, mcp)
    openai_emulator.script(ToolCalls([Call("test__append_note", '{"text": "ship it"}', id="call_note")]), Text("Noted."))
    paused = approval(await events_of(engine, request("note that", channel=f"C-write-{server.transport}")))
    assert [(call.tool, call.arguments) for call in paused.calls] == [("test__append_note", {"text": "ship it"})]
    assert server.notes() == []

    after = [event async for event in resumed_run(engine, paused.continuation_id, {"call_note": True}, actor=REQUESTER)]
    assert last_done(after).answer == "Noted."
    assert [(event.status, event.output_preview) for event in finished(after)] == [("ok", "noted: ship it")]
    assert server.notes() == ["ship it"]

    again = [event async for event in resumed_run(engine, paused.continuation_id, {"call_note": True}, actor=REQUESTER)]
    assert not any(isinstance(event, Done) for event in again)
    assert server.notes() == ["ship it"]


async def test_a_server_killed_mid_session_takes_its_tools_away_and_gives_them_back(
    db: Database, openai_emulator: OpenAIEmulator, server: FixtureServer, mcp: McpTools, caplog: pytest.LogCaptureFixture
) -> None:
    engine = engine_over(db, openai_emulator, mcp)
    channel = f"C-kill-{server.transport}"
    caplog.set_level(logging.WARNING, logger="core.tools.mcp.connection")

    server.kill()
    assert await until(lambda: "test__lookup" not in engine.registry)
    assert any("MCP server test" in record.message and "is down" in record.message for record in caplog.records)
    openai_emulator.script(Text("Still here."))
    events = await events_of(engine, request("are you there?", channel=channel))
    assert last_done(events).answer == "Still here."
    assert not offered(openai_emulator.chat_requests[-1]) & SERVER_TOOLS
    assert {"calculator", "current_time"} <= offered(openai_emulator.chat_requests[-1])

    await server.start()
    assert await until(lambda: SERVER_TOOLS <= set(engine.registry.names()))
    openai_emulator.script(ToolCalls([Call("test__lookup", '{"key": "k"}', id="call_back")]), Text("Back."))
    events = await events_of(engine, request("look k up", channel=channel))
    assert last_done(events).answer == "Back."
    assert [(event.status, event.output_preview) for event in finished(events)] == [("ok", "value of k")]
    assert SERVER_TOOLS <= offered(openai_emulator.chat_requests[-2])


async def test_an_approved_call_whose_server_went_away_gets_an_error_result_not_a_crash(
    db: Database, openai_emulator: OpenAIEmulator, server: FixtureServer, mcp: McpTools
) -> None:
    engine = engine_over(db, openai_emulator, mcp)
    openai_emulator.script(ToolCalls([Call("test__append_note", '{"text": "later"}', id="call_gone")]))
    paused = approval(await events_of(engine, request("note it", channel=f"C-gone-{server.transport}")))
    server.kill()
    assert await until(lambda: "test__append_note" not in engine.registry)

    openai_emulator.script(Text("I could not write the note."))
    after = [event async for event in resumed_run(engine, paused.continuation_id, {"call_gone": True}, actor=REQUESTER)]
    assert last_done(after).answer == "I could not write the note."
    [result] = finished(after)
    assert result.status == "error" and "not available right now" in result.output_preview
    assert not offered(openai_emulator.chat_requests[-1]) & SERVER_TOOLS  # the vanished tool is not offered again
    assert server.notes() == []


async def test_the_tool_list_follows_the_servers_change_notification(server: FixtureServer, mcp: McpTools) -> None:
    enable = mcp.specs()["test__enable_extra"]
    assert await enable.run(None, {}) == "extra enabled"  # type: ignore[arg-type]
    assert await until(lambda: "test__extra" in mcp.specs())


async def test_without_trust_a_read_only_tool_needs_approval_and_safe_tools_do_not(
    db: Database, openai_emulator: OpenAIEmulator, server: FixtureServer
) -> None:
    mcp = await connected(server, trust_read_only_hint=False, safe_tools=["test__append_note"])
    try:
        engine = engine_over(db, openai_emulator, mcp)
        approvals = engine.tool_approvals
        summaries = {name: approvals.summary(engine.registry.get(name)) for name in ("test__lookup", "test__append_note")}  # type: ignore[arg-type]
        assert (summaries["test__lookup"].listing, summaries["test__lookup"].reason) == ("needs approval", "tool default")
        assert (summaries["test__append_note"].listing, summaries["test__append_note"].reason) == (
            "no approval", "never: MCP_SAFE_TOOLS"
        )
        openai_emulator.script(ToolCalls([Call("test__append_note", '{"text": "safe"}')]), Text("Done."))
        events = await events_of(engine, request("note", channel=f"C-safe-{server.transport}"))
        assert last_done(events).answer == "Done." and server.notes() == ["safe"]
    finally:
        await mcp.close()


async def test_a_call_that_outlasts_the_timeout_ends_as_an_error(
    db: Database, openai_emulator: OpenAIEmulator, server: FixtureServer
) -> None:
    mcp = await connected(server, call_timeout_s=0.5, safe_tools=["test__slow"])
    try:
        engine = engine_over(db, openai_emulator, mcp)
        openai_emulator.script(ToolCalls([Call("test__slow", '{"seconds": 30}')]), Text("Too slow."))
        events = await events_of(engine, request("wait", channel=f"C-slow-{server.transport}"))
        assert last_done(events).answer == "Too slow."
        [result] = finished(events)
        assert result.status == "error" and "timed out after 0.5 s" in result.output_preview
        # The server is still there for the next call.
        openai_emulator.script(ToolCalls([Call("test__slow", '{"seconds": 0}')]), Text("Quick."))
        events = await events_of(engine, request("again", channel=f"C-slow-{server.transport}"))
        assert [(event.status, event.output_preview) for event in finished(events)] == [("ok", "done")]
    finally:
        await mcp.close()


async def test_a_server_down_at_start_joins_when_it_comes_up(
    db: Database, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    server = FixtureServer(transport="http", workdir=tmp_path)
    server.port = free_port()
    mcp = McpTools(parse_servers({"test": server.entry()}), call_timeout_s=10.0, **FAST)
    try:
        await mcp.start(wait_s=20)
        [status] = mcp.servers()
        assert status.state == "down" and status.error and not mcp.specs()
        engine = engine_over(db, openai_emulator, mcp)
        openai_emulator.script(Text("Fine without it."))
        assert last_done(await events_of(engine, request("hello", channel="C-late"))).answer == "Fine without it."
        await server.start()
        assert await until(lambda: SERVER_TOOLS <= set(engine.registry.names()))
    finally:
        await mcp.close()
        server.stop()


async def test_the_initialize_handshake_protocol_works_too(tmp_path: Path) -> None:
    """Servers that predate the 2026 protocol: listed after the handshake, changes by notification."""
    server = FixtureServer(transport="stdio", workdir=tmp_path)
    await server.start()
    mcp = McpTools(parse_servers({"test": server.entry()}), call_timeout_s=10.0, protocol_mode="legacy", **FAST)
    try:
        await mcp.start(wait_s=20)
        assert set(mcp.specs()) == SERVER_TOOLS
        assert await mcp.specs()["test__lookup"].run(None, {"key": "x"}) == "value of x"  # type: ignore[arg-type]
        await mcp.specs()["test__enable_extra"].run(None, {})  # type: ignore[arg-type]
        assert await until(lambda: "test__extra" in mcp.specs())
    finally:
        await mcp.close()
