"""A channel's settings change what the next question there runs with — in another process too (two
engines over one database, each with its own pool): agent type, model, prompt paragraph, tools, their
approval rules, who may approve, and the sources searched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.engine import Engine
from core.events import ApprovalRequired, Done
from core.requests import Actor, ConversationKey, Request
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from tests.core.engine.support import events_of, resumed_run
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine
from tests.support.retriever import InMemoryRetriever, MemoryDoc

CHANNEL = "test:W:C-settings"


def ask(question: str, *, channel: str = "C-settings", user: str = "U1") -> Request:
    return Request(
        question=question, conversation=ConversationKey(platform="test", workspace="W", channel=channel, thread="t1"),
        user=Actor(id=user),
    )


def offered(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


async def test_a_change_made_through_the_store_is_used_by_the_next_question_in_another_process(
    db: Database, database_url: str, tmp_path: Path, openai_emulator: OpenAIEmulator
) -> None:
    retriever = InMemoryRetriever(docs=[MemoryDoc(title="Zeppelins", text="zeppelins fly on tuesdays")])
    first = make_engine(db, openai_emulator.base_url, retriever=retriever)
    other_db = Database(url=database_url, data_dir=tmp_path)  # the second process's own pool
    await other_db.open()
    try:
        second = make_engine(other_db, openai_emulator.base_url, retriever=retriever)
        openai_emulator.script(Text("classic"), Text("agentic"))
        await events_of(second, ask("when do zeppelins fly?"))
        classic = openai_emulator.chat_requests[-1]
        assert classic["model"] == "test-model" and "internal_search" not in offered(classic)

        # An admin changes the channel (as `relaybot channels set` does) through the first process's database.
        await ChannelConfigStore(db).update(
            CHANNEL, set_fields={"agent_type": "agentic", "model": "channel-model", "system_prompt": "Answer in haiku."},
            actor="cli:admin",
        )
        events = await events_of(second, ask("when do zeppelins fly?"))
        assert isinstance(events[-1], Done)
        agentic = openai_emulator.chat_requests[-1]
        assert agentic["model"] == "channel-model"
        assert "internal_search" in offered(agentic)
        assert "\n\nAnswer in haiku." in agentic["messages"][0]["content"]
        # The first engine, untouched since, sees the same.
        openai_emulator.script(Text("agentic too"))
        await events_of(first, ask("again?", channel="C-settings"))
        assert openai_emulator.chat_requests[-1]["model"] == "channel-model"
    finally:
        await other_db.close()


async def test_tools_their_approval_rules_and_approvers_follow_the_channel(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    engine: Engine = make_engine(db, openai_emulator.base_url, approvers="U5")
    store = ChannelConfigStore(db)
    await store.update(
        "test:W:C-tools",
        set_fields={"tools": ["calculator"], "tool_policy": {"calculator": "always"}, "approvers": ["U9"]},
        actor="cli:admin",
    )
    openai_emulator.script(ToolCalls([Call("calculator", '{"expression": "2+2"}', id="c1")]), Text("4"))
    events = await events_of(engine, ask("2+2?", channel="C-tools"))
    assert offered(openai_emulator.chat_requests[-1]) == ["calculator"]  # current_time is not allowed here
    paused = events[-1]
    assert isinstance(paused, ApprovalRequired)  # the channel's rule: calculator always asks
    # U5 approves elsewhere (settings), not here; U9 does here.
    refused = [e async for e in resumed_run(engine, paused.continuation_id, {"c1": True}, actor=Actor(id="U5"))]
    assert refused[-1].kind == "failed"
    resumed = [e async for e in resumed_run(engine, paused.continuation_id, {"c1": True}, actor=Actor(id="U9"))]
    assert isinstance(resumed[-1], Done)

    # Elsewhere the settings hold: both tools offered, calculator runs without approval.
    openai_emulator.script(ToolCalls([Call("calculator", '{"expression": "2+2"}', id="c2")]), Text("4"))
    events = await events_of(engine, ask("2+2?", channel="C-other"))
    assert sorted(offered(openai_emulator.chat_requests[-2])) == ["calculator", "current_time"]
    assert isinstance(events[-1], Done)


async def test_a_channels_source_list_narrows_what_its_searches_see(db: Database, openai_emulator: OpenAIEmulator) -> None:
    retriever = InMemoryRetriever(docs=[
        MemoryDoc(title="Ops", text="zeppelins are serviced monthly", source="ops"),
        MemoryDoc(title="Sales", text="zeppelins sell well", source="sales"),
    ])
    engine = make_engine(db, openai_emulator.base_url, retriever=retriever)
    await ChannelConfigStore(db).update("test:W", set_fields={"sources": ["ops"]}, actor="cli:admin")
    openai_emulator.script(Text("ok"))
    await events_of(engine, ask("tell me about zeppelins", channel="C-narrow"))
    system = openai_emulator.chat_requests[-1]["messages"][0]["content"]
    assert "serviced monthly" in system and "sell well" not in system
    assert retriever.scopes[-1] is not None and retriever.scopes[-1].audiences == ("test:W:C-narrow",)
