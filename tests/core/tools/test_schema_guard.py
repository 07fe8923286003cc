"""Tool schemas from clients and MCP servers: no fetches or file reads, RE2 patterns, capped size, depth and work."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from core.events import Done, ToolCallFinished, ToolCallStarted
from core.requests import ConversationKey
from core.store.db import Database
from core.tools import ParsedCall, ToolCallRequest, ToolContext, ToolExecutor, ToolRegistry, ToolResult, ToolSpec, builtin_registry
from core.tools import schema_check, schemas
from core.tools.approval_policy import StaticLayer, ToolApprovals, parse_policy
from core.tools.mcp.config import parse_servers
from core.tools.mcp.tools import McpTools
from tests.core.engine.support import events_of, request, tool_messages
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine
from tests.support.loopback_site import LoopbackSite
from tests.support.mcp import FAST, FixtureServer, until

CTX = ToolContext(user="U1", conversation_id=7, conversation=ConversationKey(platform="test", workspace="W", channel="C1"))
HOSTILE_SERVER = Path(__file__).with_name("hostile_mcp_server.py")


class Canary(LoopbackSite):
    """Answers every GET with a JSON schema, and remembers that it was asked: a guarded server never is."""

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        return web.json_response({"type": "string", "db": "canary-secret"})


@pytest.fixture
async def canary() -> AsyncIterator[Canary]:
    site = Canary()
    await site.start()
    yield site
    await site.stop()


async def _noop(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    return "ran"


def spec(parameters: dict[str, Any], *, name: str = "probe", **options: Any) -> ToolSpec:
    return ToolSpec(name=name, description="a probe", parameters=parameters, run=_noop, **options)


def with_key(schema: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"key": schema}, **more}


def parse(tool: ToolSpec, arguments: Any) -> ParsedCall | ToolResult:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolExecutor(ToolRegistry([tool])).parse(ToolCallRequest(id="c1", name=tool.name, arguments=raw))


def error_of(result: ParsedCall | ToolResult) -> str:
    assert isinstance(result, ToolResult) and result.status == "error", result
    return result.output


# ----- item 1: references stay inside the schema ------------------------------------------------


async def test_a_remote_ref_is_refused_by_name_and_the_url_is_never_fetched(canary: Canary) -> None:
    url = f"{canary.base}/latest/meta-data"
    for schema in (with_key({"$ref": url}), {"$ref": url, "type": "object"},
                   with_key({"$ref": "#/$defs/x"}, **{"$defs": {"x": {"$ref": url}}})):
        with pytest.raises(ValueError, match=r"\$ref .*latest/meta-data.* does not point inside the schema"):
            spec(schema)
    assert canary.hits == []


async def test_a_base_uri_from_a_root_id_does_not_make_local_refs_fetch(canary: Canary) -> None:
    schema = with_key({"$ref": "#/$defs/word"}, **{"$id": f"{canary.base}/base.json", "$defs": {"word": {"type": "string"}}})
    tool = spec(schema)
    assert isinstance(parse(tool, {"key": "x"}), ParsedCall)
    assert "is not of type 'string'" in error_of(parse(tool, {"key": 5}))
    assert canary.hits == []
    with pytest.raises(ValueError, match=r"nested \$id"):
        spec(with_key({"$id": f"{canary.base}/inner.json", "$ref": "#/x"}))
    assert canary.hits == []


def test_a_file_ref_is_refused_and_the_file_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"db": {"const": "postgres://admin:hunter2@db"}}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"file://.* does not point inside the schema") as refused:
        spec(with_key({"$ref": f"{secret.as_uri()}#/db"}))
    assert "hunter2" not in str(refused.value)


def test_local_refs_work_and_refs_to_nothing_or_anchors_are_refused() -> None:
    tool = spec(with_key({"$ref": "#/$defs/a%20b"}, **{"$defs": {"a b": {"type": "integer", "minimum": 1}}}))
    assert isinstance(parse(tool, {"key": 3}), ParsedCall)
    assert "at 'key'" in error_of(parse(tool, {"key": 0}))
    recursive = spec({"type": "object", "properties": {"child": {"$ref": "#"}, "n": {"type": "integer"}}})
    assert isinstance(parse(recursive, {"child": {"child": {"n": 1}}}), ParsedCall)
    with pytest.raises(ValueError, match="points at no schema"):
        spec(with_key({"$ref": "#/$defs/missing"}))
    with pytest.raises(ValueError, match="points at no schema"):
        # A value inside `enum` is data, never checked as a schema: a ref may not make it one.
        spec({"type": "object", "properties": {"key": {"enum": [{"pattern": "(?=a)"}]}, "other": {"$ref": "#/properties/key/enum/0"}}})
    with pytest.raises(ValueError, match="only local"):
        spec(with_key({"$ref": "#anchor"}))


def test_size_depth_and_keywords_that_escape_the_budget_are_refused_by_name() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(schema_check.MAX_SCHEMA_DEPTH):
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(ValueError, match=f"nested deeper than {schema_check.MAX_SCHEMA_DEPTH}"):
        spec(deep)
    # Far past Python's recursion limit: refused, not a RecursionError.
    very_deep: Any = {}
    for _ in range(sys.getrecursionlimit() * 2):
        very_deep = {"not": very_deep}
    with pytest.raises(ValueError, match="nested deeper"):
        spec({"type": "object", "allOf": [very_deep]})
    big = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(1000)}}
    with pytest.raises(ValueError, match=f"at most {schema_check.MAX_SCHEMA_BYTES}"):
        spec(big)
    for keyword in ("unevaluatedProperties", "$dynamicRef"):
        with pytest.raises(ValueError, match=re.escape(keyword) + " is not supported"):
            spec({"type": "object", keyword: False if keyword.startswith("un") else "#meta"})
    with pytest.raises(ValueError, match="not a valid JSON schema"):
        spec(with_key({"type": "nonsense"}))
    # A property may be named like a keyword: only keywords where a schema stands count.
    assert isinstance(parse(spec({"type": "object", "properties": {"unevaluatedProperties": {"type": "string"}}}),
                            {"unevaluatedProperties": "x"}), ParsedCall)


# ----- item 2: patterns are RE2, and every check is bounded -------------------------------------


@pytest.mark.timeout(60)
def test_a_catastrophic_pattern_is_matched_by_re2_in_every_keyword_that_reads_patterns() -> None:
    evil = "^(a+)+$"
    hostile = "a" * 5000 + "!"
    tool = spec(with_key({"type": "string", "pattern": evil}))
    assert "does not match" in error_of(parse(tool, {"key": hostile}))
    assert isinstance(parse(tool, {"key": "aaaa"}), ParsedCall)
    names = spec({"type": "object", "patternProperties": {evil: {"type": "integer"}}, "additionalProperties": False})
    assert "not allowed" in error_of(parse(names, {hostile: 1}))
    assert "is not of type 'integer'" in error_of(parse(names, {"aaa": "x"}))
    keys = spec({"type": "object", "propertyNames": {"pattern": evil}})
    assert "does not match" in error_of(parse(keys, {hostile: 1}))


def test_patterns_re2_cannot_compile_are_refused_naming_the_pattern() -> None:
    for pattern in ("^(?=a)a+$", r"(a)\1", "(?<!x)y"):
        with pytest.raises(ValueError, match="cannot be compiled by RE2.*look-arounds and back-references"):
            spec(with_key({"type": "string", "pattern": pattern}))
        with pytest.raises(ValueError, match="cannot be compiled by RE2"):
            spec({"type": "object", "patternProperties": {pattern: {}}})
    # Patterns whose programs are big (slow to compile, slower to match) are refused, and so are too many.
    for pattern, words in (("x" * 1001, "longer than"), (".{1000}", "instructions"), ("\\pL{1000}", "too large")):
        with pytest.raises(ValueError, match=words):
            spec(with_key({"type": "string", "pattern": pattern}))
    with pytest.raises(ValueError, match=f"at most {schema_check.MAX_SCHEMA_PATTERNS} are accepted"):
        spec({"type": "object", "properties": {f"p{i}": {"pattern": f"^x{i}$"} for i in range(schema_check.MAX_SCHEMA_PATTERNS + 1)}})
    # UTF-8, and so RE2, cannot hold a lone surrogate: refused in a pattern, matched as U+FFFD in arguments.
    with pytest.raises(ValueError, match="not valid Unicode"):
        spec(with_key({"type": "string", "pattern": "\ud800"}))
    assert "does not match" in error_of(parse(spec(with_key({"type": "string", "pattern": "^a$"})), {"key": "\ud800"}))


@pytest.mark.timeout(60)
def test_approval_rule_regexes_are_re2_too_a_channel_admin_may_write_them() -> None:
    rules = parse_policy({"post": {"when": {"text": "/^(a+)+$/"}}})
    approvals = ToolApprovals([StaticLayer("channel", rules)])
    tool = spec(with_key({"type": "string"}), name="post")
    assert not approvals.decide(tool, {"text": "a" * 5000 + "!"}, CTX).needs_approval
    assert approvals.decide(tool, {"text": "aaaa"}, CTX).needs_approval
    assert approvals.summary(tool).reason == "when text=/^(a+)+$/: channel"
    with pytest.raises(ValueError, match="invalid regex for 'text'.*RE2"):
        parse_policy({"post": {"when": {"text": "/^(?!safe)/"}}})


@pytest.mark.timeout(60)
def test_a_ref_chain_that_doubles_at_each_step_is_stopped_by_the_step_budget() -> None:
    levels = 40  # 2**40 evaluations without the budget
    defs: dict[str, Any] = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
                            for i in range(levels)}
    defs[f"d{levels}"] = {"type": "string"}
    tool = spec(with_key({"$ref": "#/$defs/d0"}, **{"$defs": defs}))
    assert f"more than {schemas.MAX_VALIDATION_STEPS} steps" in error_of(parse(tool, {"key": "x"}))


def test_a_ref_loop_that_never_reaches_the_arguments_is_an_error_result() -> None:
    tool = spec({"type": "object", "allOf": [{"$ref": "#"}]})
    assert "could not be checked against its schema" in error_of(parse(tool, {}))


def test_unique_items_is_linear_and_keeps_json_equality() -> None:
    tool = spec(with_key({"type": "array", "uniqueItems": True}))
    assert isinstance(parse(tool, {"key": [{"n": i} for i in range(3000)]}), ParsedCall)
    assert "non-unique" in error_of(parse(tool, {"key": [{"n": 1, "m": [1]}, {"m": [1.0], "n": 1}]}))
    assert isinstance(parse(tool, {"key": [1, True, 0, False, None]}), ParsedCall)


def test_many_mismatches_or_long_messages_still_make_one_bounded_error_result() -> None:
    items = spec(with_key({"type": "array", "items": {"type": "string"}}))
    assert "at 'key/" in error_of(parse(items, {"key": [1] * 5000}))
    # Every one of 3000 subschemas fails and quotes the whole 90 kB instance in its message.
    quoting = spec({"type": "object", "allOf": [{"type": "string"}] * 3000})
    assert "Error: arguments for probe" in error_of(parse(quoting, {f"k{i}": "v" * 10_000 for i in range(9)}))


def test_arguments_too_long_too_deep_or_with_huge_numbers_are_error_results() -> None:
    tool = spec(with_key({"type": "string"}))
    assert f"at most {schemas.MAX_ARGUMENT_CHARS}" in error_of(parse(tool, {"key": "x" * schemas.MAX_ARGUMENT_CHARS}))
    assert "nested deeper" in error_of(parse(tool, '{"key": ' + "[" * 100 + "]" * 100 + "}"))
    assert "not valid JSON" in error_of(parse(tool, '{"key": ' + "[" * 40_000 + "]" * 40_000 + "}"))
    assert "not valid JSON" in error_of(parse(tool, '{"key": ' + "7" * 5000 + "}"))


# ----- item 1: an MCP server's bad schemas leave out only those tools ---------------------------


async def test_an_mcp_tool_with_a_hostile_schema_is_left_out_with_a_log_line_and_nothing_fetched(
    canary: Canary, caplog: pytest.LogCaptureFixture
) -> None:
    entry = {"command": sys.executable, "args": [str(HOSTILE_SERVER), canary.base]}
    mcp = McpTools(parse_servers({"hostile": entry}), call_timeout_s=10.0, **FAST)
    with caplog.at_level(logging.WARNING, logger="core.tools.mcp.tools"):
        await mcp.start(wait_s=20)
        try:
            assert await until(lambda: bool(mcp.specs())), mcp.servers()
            assert set(mcp.specs()) == {"hostile__good"}
            result = mcp.specs()["hostile__good"]
            assert "does not match" in error_of(parse(result, {"key": "A1"}))
        finally:
            await mcp.close()
    skipped = {name for name in ("fetcher", "file_reader", "lookahead", "deep")
               if any(f"tool '{name}' skipped" in record.getMessage() for record in caplog.records)}
    assert skipped == {"fetcher", "file_reader", "lookahead", "deep"}
    assert canary.hits == []


# ----- item 11a: the read-only hint is trusted per server ---------------------------------------


def test_each_server_may_say_whether_its_read_only_hints_are_trusted() -> None:
    servers = parse_servers({
        "own_no": {"command": "x", "trust_read_only_hint": False},
        "own_yes": {"url": "http://127.0.0.1:1/mcp", "trust_read_only_hint": True},
        "silent": {"command": "x"},
    })
    assert [server.trust_read_only_hint for server in servers] == [False, True, None]
    assert [server.trusts_read_only_hint(default=True) for server in servers] == [False, True, True]
    assert [server.trusts_read_only_hint(default=False) for server in servers] == [False, True, False]
    with pytest.raises(ValueError, match="trust_read_only_hint of the server 'bad' must be true or false"):
        parse_servers({"bad": {"command": "x", "trust_read_only_hint": "yes"}})


async def test_a_servers_own_trust_setting_overrides_the_global_default(tmp_path: Path) -> None:
    fixture = FixtureServer(transport="stdio", workdir=tmp_path)
    await fixture.start()
    entries = {"distrusted": {**fixture.entry(), "trust_read_only_hint": False}, "default": fixture.entry()}
    for global_trust, expected in ((True, {"distrusted__lookup": "needs approval", "default__lookup": "no approval"}),
                                   (False, {"distrusted__lookup": "needs approval", "default__lookup": "needs approval"})):
        mcp = McpTools(parse_servers(entries), call_timeout_s=10.0, trust_read_only_hint=global_trust, **FAST)
        await mcp.start(wait_s=20)
        try:
            assert await until(lambda: {"distrusted__lookup", "default__lookup"} <= set(mcp.specs())), mcp.servers()
            approvals = ToolApprovals(mcp.approval_layers())
            assert {name: approvals.summary(mcp.specs()[name]).listing for name in expected} == expected
            # A write tool is never trusted by a hint it does not carry.
            assert approvals.summary(mcp.specs()["default__append_note"]).listing == "needs approval"
        finally:
            await mcp.close()
    trusting = McpTools(parse_servers({"own": {**fixture.entry(), "trust_read_only_hint": True}}), call_timeout_s=10.0, **FAST)
    await trusting.start(wait_s=20)
    try:
        assert await until(lambda: "own__lookup" in trusting.specs()), trusting.servers()
        summary = ToolApprovals(trusting.approval_layers()).summary(trusting.specs()["own__lookup"])
        assert summary.listing == "no approval" and "own.trust_read_only_hint" in summary.reason
    finally:
        await trusting.close()
        fixture.stop()


# ----- item 11b: a failing approval rule fails only its call ------------------------------------


async def test_an_approval_rule_that_raises_becomes_that_calls_error_and_the_run_goes_on(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    runs: list[dict[str, Any]] = []

    async def fragile_run(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        runs.append(arguments)
        return "fetched"

    def rule(ctx: ToolContext, arguments: dict[str, Any]) -> bool:
        raise ValueError(f"cannot normalise {arguments['url']!r}")

    registry = builtin_registry()
    registry.register(ToolSpec(name="fragile", description="a tool whose approval rule raises", run=fragile_run,
                               parameters={"type": "object", "properties": {"url": {"type": "string"}}},
                               approval_rule=rule))
    engine = make_engine(db, openai_emulator.base_url, registry=registry)
    openai_emulator.script(
        ToolCalls([Call("fragile", '{"url": "http://[::1"}', id="c_fragile"), Call("calculator", '{"expression": "2+2"}', id="c_calc")]),
        Text("Done anyway."),
    )
    events = await events_of(engine, request("read http://[::1 and add 2+2"))
    done = [event for event in events if isinstance(event, Done)]
    assert done and done[-1].answer == "Done anyway."
    outputs = tool_messages(openai_emulator.chat_requests[-1])
    assert "could not be decided" in outputs["c_fragile"] and "http://[::1" in outputs["c_fragile"]
    assert outputs["c_calc"] == "2+2 = 4"
    assert runs == []
    # Not started, so no tool-run audit line says it ran: it ends as an error at once, like broken arguments.
    started = [event.call_id for event in events if isinstance(event, ToolCallStarted)]
    assert "c_fragile" not in started and "c_calc" in started
    assert any(isinstance(event, ToolCallFinished) and event.call_id == "c_fragile" and event.status == "error"
               for event in events)
