"""The executor turns every bad call and failing tool into an error result; good calls run and are capped."""

from __future__ import annotations

import dataclasses

import asyncio
import json
from typing import Any

import pytest

from core.requests import ConversationKey

from core.tools import (
    ParsedCall,
    ToolCallRequest,
    ToolContext,
    ToolError,
    ToolExecutor,
    ToolRegistry,
    ToolResult,
    ToolSpec,
    builtin_registry,
    truncate_middle,
)

CTX = ToolContext(user="U1", conversation_id=7, conversation=ConversationKey(platform="test", workspace="W", channel="C1"))
OBJECT: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def call(name: str, arguments: str, call_id: str = "call_1") -> ToolCallRequest:
    return ToolCallRequest(id=call_id, name=name, arguments=arguments)


def spec(name: str, run: Any, **options: Any) -> ToolSpec:
    return ToolSpec(name=name, description=f"{name} for tests", parameters=OBJECT, run=run, **options)


def parsed(executor: ToolExecutor, request: ToolCallRequest) -> ParsedCall:
    result = executor.parse(request)
    assert isinstance(result, ParsedCall), result
    return result


async def test_valid_call_runs_and_reports_ok() -> None:
    executor = ToolExecutor(builtin_registry())
    result = await executor.run(parsed(executor, call("calculator", '{"expression": "6*7"}')), CTX)
    assert result == ToolResult(
        call_id="call_1", tool="calculator", status="ok", output="6*7 = 42", arguments={"expression": "6*7"}
    )


async def test_run_receives_context_and_arguments() -> None:
    seen: list[tuple[ToolContext, dict[str, Any]]] = []

    async def record(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        seen.append((ctx, arguments))
        return "done"

    executor = ToolExecutor(ToolRegistry([spec("record", record)]))
    result = await executor.run(parsed(executor, call("record", "")), CTX)
    assert result.status == "ok"
    assert seen == [(CTX, {})]


def test_malformed_json_is_an_error_result() -> None:
    result = ToolExecutor(builtin_registry()).parse(call("calculator", '{"expression": "1+'))
    assert isinstance(result, ToolResult)
    assert result.status == "error"
    assert result.output.startswith("Error: arguments for calculator are not valid JSON: ")
    assert result.output.endswith("Call the tool again with valid JSON.")
    assert result.arguments == {}


def test_json_that_is_not_an_object_is_an_error_result() -> None:
    result = ToolExecutor(builtin_registry()).parse(call("calculator", '["1+1"]'))
    assert isinstance(result, ToolResult)
    assert result.status == "error"
    assert "must be a JSON object, not list" in result.output


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ("{}", "'expression' is a required property"),
        ('{"expression": 5}', "at 'expression': 5 is not of type 'string'"),
        ('{"expression": "1", "extra": true}', "Additional properties are not allowed"),
    ],
)
def test_schema_violation_is_an_error_result(arguments: str, fragment: str) -> None:
    result = ToolExecutor(builtin_registry()).parse(call("calculator", arguments))
    assert isinstance(result, ToolResult)
    assert result.status == "error"
    assert result.output.startswith("Error: arguments for calculator do not match its schema")
    assert fragment in result.output
    assert result.arguments == json.loads(arguments)


def test_unknown_tool_lists_the_available_ones() -> None:
    result = ToolExecutor(builtin_registry()).parse(call("rm_rf", "{}"))
    assert isinstance(result, ToolResult)
    assert result.status == "error"
    assert result.tool == "rm_rf"
    assert result.output == "Error: there is no tool named 'rm_rf'. Available tools: calculator, current_time."


def test_registered_but_not_offered_tool_is_refused() -> None:
    executor = ToolExecutor(builtin_registry())
    result = executor.parse(call("current_time", "{}"), offered=["calculator"])
    assert isinstance(result, ToolResult)
    assert result.output == "Error: there is no tool named 'current_time'. Available tools: calculator."
    assert isinstance(executor.parse(call("calculator", '{"expression": "1"}'), offered=["calculator"]), ParsedCall)


async def test_timeout_becomes_an_error_result() -> None:
    started = asyncio.Event()

    async def sleepy(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        started.set()
        await asyncio.Event().wait()  # never set: only the timeout ends this
        return "unreachable"

    executor = ToolExecutor(ToolRegistry([spec("sleepy", sleepy, timeout_s=0.01)]))
    result = await executor.run(parsed(executor, call("sleepy", "{}")), CTX)
    assert started.is_set()
    assert result.status == "error"
    assert result.output == "Error: sleepy timed out after 0.01 s."


async def test_a_timeout_raised_by_the_tool_itself_is_a_failure_not_ours() -> None:
    async def own_timeout(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        raise TimeoutError("upstream did not answer")

    executor = ToolExecutor(ToolRegistry([spec("own_timeout", own_timeout)]))
    result = await executor.run(parsed(executor, call("own_timeout", "{}")), CTX)
    assert result.output == "Error: own_timeout failed: upstream did not answer"


async def test_exception_becomes_an_error_result_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        raise RuntimeError("disk on fire")

    executor = ToolExecutor(ToolRegistry([spec("broken", broken)]))
    result = await executor.run(parsed(executor, call("broken", "{}")), CTX)
    assert result.status == "error"
    assert result.output == "Error: broken failed: disk on fire"
    assert "Traceback" not in result.output
    assert any(record.exc_info for record in caplog.records if record.name == "core.tools.executor")


async def test_tool_error_message_reaches_the_model() -> None:
    executor = ToolExecutor(builtin_registry())
    result = await executor.run(parsed(executor, call("calculator", '{"expression": "1/0"}')), CTX)
    assert result.status == "error"
    assert result.output == "Error: division by zero."


async def test_non_text_output_is_an_error_result() -> None:
    async def numeric(ctx: ToolContext, arguments: dict[str, Any]) -> Any:
        return 42

    executor = ToolExecutor(ToolRegistry([spec("numeric", numeric)]))
    result = await executor.run(parsed(executor, call("numeric", "{}")), CTX)
    assert result.status == "error"


async def test_output_is_capped_by_middle_truncation() -> None:
    text = "HEAD" + "x" * 5000 + "TAIL"

    async def verbose(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        return text

    executor = ToolExecutor(ToolRegistry([spec("verbose", verbose, max_output_chars=200)]))
    result = await executor.run(parsed(executor, call("verbose", "{}")), CTX)
    assert result.status == "ok"
    assert len(result.output) <= 200
    assert result.output.startswith("HEAD") and result.output.endswith("TAIL")
    assert "characters omitted" in result.output


@pytest.mark.parametrize("limit", [1, 5, 30, 31, 32, 100, 999, 1000, 1001])
def test_truncate_middle_respects_the_limit_and_reports_what_it_cut(limit: int) -> None:
    text = "a" * 600 + "b" * 600
    cut = truncate_middle(text, limit)
    assert len(cut) <= limit
    if "omitted" in cut:
        omitted = int(cut.split("[")[1].split(" ")[0])
        assert len(cut) - len(cut.split("\n")[1]) - 2 + omitted == len(text)
    assert truncate_middle("short", limit + 5) == "short"


def test_needs_approval_follows_the_registry() -> None:
    async def noop(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        return ""

    executor = ToolExecutor(ToolRegistry([spec("send", noop, requires_approval=True), spec("read", noop)]))
    assert executor.needs_approval(parsed(executor, call("send", "{}")), CTX)
    assert not executor.needs_approval(parsed(executor, call("read", "{}")), CTX)


def test_an_approval_rule_decides_per_call_and_an_override_replaces_it() -> None:
    async def fetch(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        return ""

    def unless_asker_named_it(ctx: ToolContext, arguments: dict[str, Any]) -> bool:
        return arguments.get("url", "") not in ctx.question

    guarded = ToolSpec(
        name="fetch",
        description="fetch for tests",
        parameters={"type": "object", "properties": {"url": {"type": "string"}}},
        run=fetch,
        approval_rule=unless_asker_named_it,
    )
    executor = ToolExecutor(ToolRegistry([guarded]))
    asked = dataclasses.replace(CTX, question="please read https://example.org/a")
    assert not executor.needs_approval(parsed(executor, call("fetch", '{"url": "https://example.org/a"}')), asked)
    assert executor.needs_approval(parsed(executor, call("fetch", '{"url": "https://evil.example/x"}')), asked)
    relaxed = ToolExecutor(ToolRegistry([guarded]).with_approval_overrides({"fetch": False}))
    assert not relaxed.needs_approval(parsed(relaxed, call("fetch", '{"url": "https://evil.example/x"}')), asked)


def test_rejected_with_and_without_comment() -> None:
    executor = ToolExecutor(builtin_registry())
    request = call("calculator", '{"expression": "1"}')
    plain = executor.rejected(request)
    assert plain == ToolResult(
        call_id="call_1",
        tool="calculator",
        status="rejected",
        output="The user declined this tool call.",
        arguments={"expression": "1"},
    )
    with_comment = executor.rejected(parsed(executor, request), "  not now  ")
    assert with_comment.status == "rejected"
    assert with_comment.output == "The user declined this tool call: not now"


def test_rejected_call_with_unparseable_arguments_keeps_empty_arguments() -> None:
    result = ToolExecutor(builtin_registry()).rejected(call("gone_tool", "{oops"), "")
    assert result.arguments == {}
    assert result.output == "The user declined this tool call."


async def test_cancellation_is_not_swallowed() -> None:
    started = asyncio.Event()

    async def waits(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        started.set()
        await asyncio.Event().wait()
        return ""

    executor = ToolExecutor(ToolRegistry([spec("waits", waits)]))
    task = asyncio.create_task(executor.run(parsed(executor, call("waits", "{}")), CTX))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_tool_error_is_an_exception() -> None:
    assert issubclass(ToolError, Exception)
