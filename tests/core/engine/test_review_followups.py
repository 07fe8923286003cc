"""Follow-ups from review: resume checks the policy, live runs are not reverted, documents fit small models."""

from __future__ import annotations

from core.approvals import Click
from core.events import ApprovalRequired, Done, Failed
from core.requests import Actor
from core.store.db import Database
from tests.core.engine.support import resumed_run, RecordingTool, events_of, registry_with, request
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine
from tests.support.retriever import InMemoryRetriever, MemoryDoc


async def test_resume_by_someone_not_allowed_is_refused_even_when_all_calls_are_decided(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    openai_emulator.script(ToolCalls([Call("deploy", '{"env": "prod"}')]), Text("Deployed."))
    [paused] = [e for e in await events_of(engine, request("deploy", channel="C-policy")) if isinstance(e, ApprovalRequired)]
    outcome = await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id=None, approved=True, actor=Actor(id="U1"),
    ))
    assert outcome.outcome == "ready"
    stranger = [e async for e in resumed_run(engine, paused.continuation_id, actor=Actor(id="U-stranger"))]
    assert len(stranger) == 1 and isinstance(stranger[0], Failed) and tool.runs == []
    owner = [e async for e in resumed_run(engine, paused.continuation_id, actor=Actor(id="U1"))]
    assert isinstance(owner[-1], Done) and tool.runs == [{"env": "prod"}]


async def test_a_resumed_run_that_is_still_alive_is_not_reverted(db: Database, openai_emulator: OpenAIEmulator) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    openai_emulator.script(
        ToolCalls([Call("deploy", '{"env": "stage"}')]), Text("slowly deployed " * 20, chunk_chars=4, delay_s=0.01)
    )
    [paused] = [e for e in await events_of(engine, request("deploy", channel="C-alive")) if isinstance(e, ApprovalRequired)]
    resumed = resumed_run(engine, paused.continuation_id, {paused.calls[0].call_id: True}, actor=Actor(id="U1"))
    async for _event in resumed:
        # Mid-run: the lease is held and renewed, so even a zero-second threshold leaves it alone.
        assert await engine.approvals.revert_stuck(older_than_s=0) == 0
        break
    await resumed.aclose()


async def test_prefetched_documents_leave_room_in_a_small_context(db: Database, openai_emulator: OpenAIEmulator) -> None:
    runbook = "deploy " + "checklist step " * 300  # ~600 tokens each; six of them overflow a 4k context
    retriever = InMemoryRetriever(docs=[MemoryDoc(title=f"Runbook {n}", text=runbook) for n in range(6)])
    engine = make_engine(
        db, openai_emulator.base_url, retriever=retriever, llm_model_overrides={"context_limit": 4096}, retrieval_doc_tokens=100_000
    )
    events = await events_of(engine, request("how do I deploy", channel="C-small"))
    assert isinstance(events[-1], Done)
    sent = openai_emulator.chat_requests[-1]["messages"]
    assert "Runbook 0" in sent[0]["content"]  # documents were prefetched…
    assert sent[-1]["content"] == "how do I deploy"  # …but never squeeze the question out


async def test_a_withdrawn_approval_cannot_be_decided(db: Database, openai_emulator: OpenAIEmulator) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    openai_emulator.script(ToolCalls([Call("deploy", '{"env": "prod"}')]), Text("Deployed."))
    [paused] = [e for e in await events_of(engine, request("deploy", channel="C-withdraw")) if isinstance(e, ApprovalRequired)]
    assert await engine.approvals.withdraw(paused.continuation_id) is True
    assert await engine.approvals.withdraw(paused.continuation_id) is False
    outcome = await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id=None, approved=True, actor=Actor(id="U1"),
    ))
    assert outcome.outcome == "already_handled" and tool.runs == []
