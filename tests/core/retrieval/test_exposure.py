"""Exposure split through a real Engine: prefetch sources go into the prompt, agentic_tool ones behind internal_search."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.events import Done, Sources
from core.requests import Actor, ConversationKey, Request
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.search import PgRetriever
from core.store.db import Database
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine


@pytest.fixture(autouse=True)
async def empty_tables(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")


async def add_source(db: Database, root: Path, *, name: str, exposure: str, text: str) -> None:
    root.mkdir()
    (root / f"{name}.md").write_text(text)
    request = IngestRequest(source=name, exposure=exposure, targets=[str(root)])  # type: ignore[arg-type]
    await ingest(db, request, embedder=None)


def ask(question: str, agent_type: str | None = None, channel: str = "C1") -> Request:
    return Request(
        question=question,
        conversation=ConversationKey(platform="test", workspace="W", channel=channel),
        user=Actor(id="U1", name="Ada"),
        agent_type=agent_type,
    )


def system_prompt(request: dict[str, Any]) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "system")


def offered(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


async def test_classic_prefetches_prefetch_docs_and_offers_search_only_with_agentic_sources(
    db: Database, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    await add_source(
        db, tmp_path / "handbook", name="handbook", exposure="prefetch",
        text="# Holidays\n\nThe holiday calendar lists the gloaming festival as a day off.\n",
    )
    engine = make_engine(db, openai_emulator.base_url, retriever=PgRetriever(db, None))
    openai_emulator.script(Text("It is a day off [1]."))
    events = [event async for event in engine.ask(ask("Is the gloaming festival a day off?", channel="C1"))]
    first = openai_emulator.chat_requests[-1]
    assert "gloaming festival" in system_prompt(first)
    assert "internal_search" not in offered(first)
    sources = next(event for event in events if isinstance(event, Sources))
    assert sources.items[0].source == "handbook"

    await add_source(
        db, tmp_path / "runbooks", name="runbooks", exposure="agentic_tool",
        text="# Failover\n\nDuring the gloaming festival the failover switch is the brass lever.\n",
    )
    openai_emulator.script(Text("ok"))
    _ = [event async for event in engine.ask(ask("Is the gloaming festival a day off?", channel="C2"))]
    second = openai_emulator.chat_requests[-1]
    assert "internal_search" in offered(second)
    assert "gloaming festival as a day off" in system_prompt(second)
    assert "brass lever" not in system_prompt(second)  # agentic_tool docs are never prefetched


async def test_an_agentic_runs_internal_search_returns_agentic_tool_docs(
    db: Database, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    await add_source(
        db, tmp_path / "runbooks", name="runbooks", exposure="agentic_tool",
        text="# Failover\n\nThe failover switch is the brass lever behind rack nine.\n",
    )
    await add_source(
        db, tmp_path / "archive", name="archive", exposure="off",
        text="# Old failover\n\nThe failover switch used to be the copper lever.\n",
    )
    engine = make_engine(db, openai_emulator.base_url, retriever=PgRetriever(db, None))
    openai_emulator.script(
        ToolCalls([Call("internal_search", json.dumps({"query": "failover switch lever"}))]),
        Text("Pull the brass lever [1]."),
    )
    events = [event async for event in engine.ask(ask("Where is the failover switch?", agent_type="agentic"))]
    assert isinstance(events[-1], Done)
    assert "internal_search" in offered(openai_emulator.chat_requests[0])
    tool_results = [m for m in openai_emulator.chat_requests[-1]["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 1
    assert "brass lever behind rack nine" in tool_results[0]["content"]
    assert "copper" not in tool_results[0]["content"]  # an `off` source is never searched
    sources = next(event for event in events if isinstance(event, Sources))
    assert [item.source for item in sources.items] == ["runbooks"]
