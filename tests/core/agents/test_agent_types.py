"""Classic, agentic and research agents differ as specified, seen from the requests the model receives."""

from __future__ import annotations

from typing import Any

from core.events import Done, Event, Sources, ToolCallFinished, ToolCallStarted
from core.store.db import Database
from tests.core.engine.support import assert_valid_chat_request, events_of, last_done, request, tool_messages
from tests.emulators.openai_server import JSON, Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine
from tests.support.retriever import InMemoryRetriever, MemoryDoc

VACATION = MemoryDoc(title="Vacation policy", text="Employees get 25 vacation days per year.", uri="https://wiki/vacation")
PARKING = MemoryDoc(title="Parking", text="Parking permits are free for cyclists too.", exposure="agentic_tool")
BUDGET = MemoryDoc(title="Budget", text="The travel budget is 2000 euros per year.")


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or ()]


def system_of(body: dict[str, Any]) -> str:
    return body["messages"][0]["content"]


async def test_classic_prefetches_into_the_prompt_and_offers_no_search_without_agentic_sources(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    retriever = InMemoryRetriever(docs=[VACATION])
    engine = make_engine(db, openai_emulator.base_url, retriever=retriever)
    openai_emulator.script(Text("You get 25 days [1]."))
    events = await events_of(engine, request("how many vacation days per year?", channel="C-classic"))
    body = openai_emulator.chat_requests[0]
    assert "[1] Vacation policy (https://wiki/vacation)\nEmployees get 25 vacation days per year." in system_of(body)
    assert "internal_search" not in tool_names(body)
    assert retriever.searches == [("how many vacation days per year?", "prefetch")]
    sources = [event for event in events if isinstance(event, Sources)]
    assert [item.title for item in sources[0].items] == ["Vacation policy"]
    assert isinstance(events[-1], Done) and events.index(sources[0]) == len(events) - 2


async def test_classic_offers_internal_search_over_agentic_tool_sources_only(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    retriever = InMemoryRetriever(docs=[VACATION, PARKING])
    engine = make_engine(db, openai_emulator.base_url, retriever=retriever, agent_type="react")
    openai_emulator.script(
        ToolCalls([Call("internal_search", '{"query": "parking permits vacation"}', id="call_s")]),
        Text("Cyclists park free [2]."),
    )
    events = await events_of(engine, request("vacation and parking permits?", channel="C-mixed"))
    first = openai_emulator.chat_requests[0]
    assert "Vacation policy" in system_of(first) and "Parking" not in system_of(first)
    assert "internal_search" in tool_names(first)
    # The tool searches only the agentic_tool sources, and numbers follow the prefetched one.
    assert retriever.searches[-1] == ("parking permits vacation", "agentic_tool")
    result = tool_messages(openai_emulator.chat_requests[1])["call_s"]
    assert "[2] Parking" in result and "Vacation policy" not in result
    sources = [event for event in events if isinstance(event, Sources)][0]
    assert [item.title for item in sources.items] == ["Vacation policy", "Parking"]
    assert last_done(events).answer == "Cyclists park free [2]."


async def test_agentic_has_no_documents_in_the_prompt_and_searches_through_the_tool(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    retriever = InMemoryRetriever(docs=[VACATION, PARKING])
    engine = make_engine(db, openai_emulator.base_url, retriever=retriever, agent_type="agentic")
    openai_emulator.script(
        ToolCalls([Call("internal_search", '{"query": "vacation days"}', id="call_v")]),
        Text("25 days [1]."),
    )
    events = await events_of(engine, request("how many vacation days?", channel="C-agentic"))
    first = openai_emulator.chat_requests[0]
    assert "Employees get 25" not in system_of(first) and "Documents from" not in system_of(first)
    assert "internal_search" in tool_names(first)
    assert retriever.searches == [("vacation days", None)]
    second = openai_emulator.chat_requests[1]
    assert_valid_chat_request(second)
    result = tool_messages(second)["call_v"]
    assert result.startswith("Passages (cite as [n]):")
    assert "[1] Vacation policy (https://wiki/vacation)\nEmployees get 25 vacation days per year." in result
    started = [event for event in events if isinstance(event, ToolCallStarted)]
    assert started[0].arguments == {"query": "vacation days"}
    sources = [event for event in events if isinstance(event, Sources)][0]
    assert [item.title for item in sources.items] == ["Vacation policy"]
    assert last_done(events).answer == "25 days [1]."


async def research(db: Database, emulator: OpenAIEmulator, **overrides: Any) -> list[Event]:
    retriever = InMemoryRetriever(docs=[VACATION, PARKING, BUDGET])
    engine = make_engine(db, emulator.base_url, retriever=retriever, agent_type="research", **overrides)
    emulator.script(
        JSON({"sub_questions": ["vacation days per year", "travel budget per year"]}),
        Text("25 days [1] and 2000 euros [2]."),
    )
    return await events_of(engine, request("vacation and travel budget?", channel=f"C-research-{len(overrides)}"))


async def test_research_plans_with_structured_output_then_answers_from_every_sub_question(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    events = await research(db, openai_emulator, llm_model_overrides={"supports_structured_output": True})
    planner, answer = openai_emulator.chat_requests
    assert planner["response_format"]["type"] == "json_schema"
    assert planner["response_format"]["json_schema"]["name"] == "research_plan"
    assert "tools" not in planner
    assert planner["messages"][-1] == {"role": "user", "content": "vacation and travel budget?"}
    assert "response_format" not in answer
    prompt = system_of(answer)
    assert "[1] Vacation policy" in prompt and "Employees get 25" in prompt
    assert "[2] Budget" in prompt and "2000 euros" in prompt
    searches = [event.arguments["query"] for event in events if isinstance(event, ToolCallStarted)]
    assert searches == ["vacation days per year", "travel budget per year"]
    assert [e.status for e in events if isinstance(e, ToolCallFinished)] == ["ok", "ok"]
    sources = [event for event in events if isinstance(event, Sources)][0]
    assert [item.title for item in sources.items][:2] == ["Vacation policy", "Budget"]
    assert last_done(events).answer == "25 days [1] and 2000 euros [2]."


async def test_research_sends_no_response_format_to_a_model_without_structured_output(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    events = await research(db, openai_emulator)
    planner, answer = openai_emulator.chat_requests
    assert "response_format" not in planner
    assert "[1] Vacation policy" in system_of(answer) and "Budget" in system_of(answer)
    assert isinstance(events[-1], Done)
