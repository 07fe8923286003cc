"""Outside text each store writes (issue 21 fuzz): a page's title and text kept as a source, a decision's comment and a
client tool's result, each with NUL or a lone surrogate, are stored through the real engine and Postgres."""

from __future__ import annotations

import json
from dataclasses import replace
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from core.approvals import Click
from core.events import ApprovalRequired, Done, Sources
from core.requests import Actor, ClientTool
from core.retrieval.loaders import BINARY_SNIFF_BYTES
from core.store.continuations import Decision
from core.store.db import Database
from core.tools import builtin_registry
from core.tools.read_url import ReadUrlConfig, read_url_tool
from tests.core.engine.support import (RecordingTool, approval, events_of, last_done, request, resumed_run,
                                       tool_messages)
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine
from tests.support.loopback_site import LoopbackSite

READ_URL = ReadUrlConfig(allowed_networks=["127.0.0.1/32"], max_bytes=50_000, timeout_s=2.0)
APPROVER = Actor(id="U1", name="Ada")


class NulPages(LoopbackSite):
    """A Markdown page whose NUL comes after the loader's binary sniff, in its title (the first heading)."""

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        text = "z" * (BINARY_SNIFF_BYTES + 10) + "\n\n# Status\x00 page\n\nAll green today.\n"
        return web.Response(text=text, content_type="text/markdown")


@pytest.fixture
async def pages() -> AsyncIterator[NulPages]:
    site = NulPages()
    await site.start()
    yield site
    await site.stop()


async def test_a_page_with_nul_is_a_source_a_paused_run_keeps(
    db: Database, openai_emulator: OpenAIEmulator, pages: NulPages
) -> None:
    # The page's title and text became a SourceItem as they were: the pause's state (jsonb) failed on the NUL.
    deploy = RecordingTool(requires_approval=True)
    registry = builtin_registry()
    registry.register(read_url_tool(READ_URL))
    registry.register(deploy.spec())
    engine = make_engine(db, openai_emulator.base_url, registry=registry)
    url = f"{pages.base}/status"
    openai_emulator.script(
        ToolCalls([Call("read_url", json.dumps({"url": url}), id="call_read")]),
        ToolCalls([Call("deploy", '{"env": "prod"}', id="call_deploy")]),
        Text("Green, so deployed [1]."),
    )
    paused = approval(await events_of(engine, request(f"is <{url}> green? then deploy", channel="C-nul-page")))
    resumed = [event async for event in resumed_run(engine, paused.continuation_id, {"call_deploy": True},
                                                    actor=APPROVER)]
    assert last_done(resumed).answer == "Green, so deployed [1]."
    [sources] = [event for event in resumed if isinstance(event, Sources)]
    assert sources.items[0].title == "Status page"
    assert deploy.runs == [{"env": "prod"}]


async def test_a_rejection_comment_with_nul_and_a_lone_surrogate_is_recorded(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    deploy = RecordingTool(requires_approval=True)
    registry = builtin_registry()
    registry.register(deploy.spec())
    engine = make_engine(db, openai_emulator.base_url, registry=registry)
    openai_emulator.script(ToolCalls([Call("deploy", '{"env": "prod"}', id="call_deploy")]), Text("Not deployed."))
    paused = approval(await events_of(engine, request("deploy prod", channel="C-nul-comment")))
    clicked = await engine.approvals.click(Click(
        continuation_id=paused.continuation_id, approved=False, actor=APPROVER, comment="not\x00 today \ud800",
    ))
    assert clicked.outcome == "ready" and clicked.events is not None, clicked
    events = [event async for event in clicked.events]
    assert isinstance(events[-1], Done) and deploy.runs == []
    assert "not today \ufffd" in tool_messages(openai_emulator.chat_requests[-1])["call_deploy"]


async def test_a_client_tools_result_with_nul_is_recorded_and_read_by_the_model(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    engine = make_engine(db, openai_emulator.base_url)
    lookup = ClientTool(name="lookup", description="Looks up", parameters={"type": "object", "properties": {}})
    openai_emulator.script(ToolCalls([Call("lookup", "{}", id="call_lookup")]), Text("Found it."))
    events = await events_of(engine, replace(request("look it up", channel="C-nul-result"), client_tools=(lookup,)))
    paused = events[-1]
    assert isinstance(paused, ApprovalRequired), paused
    result = await engine.approvals.submit(
        paused.continuation_id, {"call_lookup": Decision(approved=True, actor="api", result="rows:\x00 3 \ud800")},
        actor=APPROVER)
    assert result.events is not None, result
    resumed = [event async for event in result.events]
    assert last_done(resumed).answer == "Found it."
    assert tool_messages(openai_emulator.chat_requests[-1])["call_lookup"] == "rows: 3 \ufffd"
