"""Every tool run writes one audit line (who, which tool, how it ended) and counts in relaybot_tool_runs_total."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.requests import ConversationKey
from core.tools import ParsedCall, ToolCallRequest, ToolContext, ToolError, ToolExecutor, ToolRegistry, ToolSpec
from tests.support.observe import records_with, sample

CTX = ToolContext(
    user="U7", user_name="Grace", conversation_id=7, conversation=ConversationKey(platform="test", workspace="W", channel="C1")
)
OBJECT: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


async def ok(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    return "fine"


async def refuses(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    raise ToolError("no such host")


async def crashes(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    raise RuntimeError("disk on fire")


async def hangs(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    await asyncio.Event().wait()
    return "unreachable"


@pytest.mark.parametrize(
    ("name", "run", "outcome"),
    [("audit_ok", ok, "ok"), ("audit_refuses", refuses, "error"), ("audit_crashes", crashes, "crashed"),
     ("audit_hangs", hangs, "timeout")],
)
async def test_each_run_is_audited_with_its_outcome(name: str, run: Any, outcome: str, caplog: pytest.LogCaptureFixture) -> None:
    executor = ToolExecutor(ToolRegistry([ToolSpec(name=name, description="t", parameters=OBJECT, run=run, timeout_s=0.01)]))
    parsed = executor.parse(ToolCallRequest(id="call_9", name=name, arguments="{}"))
    assert isinstance(parsed, ParsedCall)
    before = sample("relaybot_tool_runs_total", tool=name, outcome=outcome)
    caplog.set_level("INFO")
    await executor.run(parsed, CTX)
    [line] = records_with(caplog, audit="tool_run")
    assert (line.tool, line.call_id, line.user, line.user_name, line.outcome) == (name, "call_9", "U7", "Grace", outcome)
    assert f"tool run: {name} (call call_9) for Grace ended {outcome}" in line.getMessage()
    assert sample("relaybot_tool_runs_total", tool=name, outcome=outcome) == before + 1


async def test_a_run_cancelled_at_shutdown_is_audited_as_cancelled(caplog: pytest.LogCaptureFixture) -> None:
    started = asyncio.Event()

    async def waits(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        started.set()
        await asyncio.Event().wait()
        return "unreachable"

    executor = ToolExecutor(ToolRegistry([ToolSpec(name="audit_waits", description="t", parameters=OBJECT, run=waits)]))
    parsed = executor.parse(ToolCallRequest(id="call_c", name="audit_waits", arguments="{}"))
    assert isinstance(parsed, ParsedCall)
    caplog.set_level("INFO")
    task = asyncio.create_task(executor.run(parsed, CTX))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [line] = records_with(caplog, audit="tool_run")
    assert line.outcome == "cancelled"
