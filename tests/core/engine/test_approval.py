"""Pause for approval, decide per call, resume exactly once — also after a restart and under a stampede."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import uuid
from typing import Any

import pytest

from core.approvals import ApprovalService, Click
from core.engine import Engine
from core.events import ApprovalRequired, Done, Event, Failed, ToolCallFinished
from core.requests import Actor
from core.store.continuations import ContinuationStore
from core.store.db import Database
from tests.core.engine.support import (
    resumed_run,
    RecordingTool,
    approval,
    assert_valid_chat_request,
    events_of,
    last_done,
    registry_with,
    request,
    tool_messages,
)
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine

REQUESTER = Actor(id="U1", name="Ada")
STRANGER = Actor(id="U2", name="Bob")


def deploy_call(env: str = "prod", call_id: str = "call_dep") -> ToolCalls:
    return ToolCalls([Call("deploy", f'{{"env": "{env}"}}', id=call_id)])


async def pause(engine: Engine, emulator: OpenAIEmulator, *replies: Any, channel: str) -> ApprovalRequired:
    emulator.script(*replies)
    return approval(await events_of(engine, request("please deploy", channel=channel)))


async def resumed(engine: Engine, continuation_id: str, actor: Actor = REQUESTER) -> list[Event]:
    return [event async for event in resumed_run(engine, continuation_id, actor=actor)]


def engine_with(db: Database, emulator: OpenAIEmulator, tool: RecordingTool, **overrides: Any) -> Engine:
    return make_engine(db, emulator.base_url, registry=registry_with(tool), **overrides)


async def test_pause_is_announced_after_the_row_is_committed_then_approve_runs_the_tool_once(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = engine_with(db, openai_emulator, tool)
    openai_emulator.script(deploy_call(), Text("Deployed to prod."))
    events: list[Event] = []
    async for event in engine.ask(request("please deploy", channel="C-approve")):
        if isinstance(event, ApprovalRequired):
            # Read through another connection: the row must already be committed.
            async with db.connection() as conn:
                cursor = await conn.execute("SELECT status FROM continuations WHERE id = %s", (uuid.UUID(event.continuation_id),))
                assert await cursor.fetchone() == ("pending",)
        events.append(event)
    paused = approval(events)
    assert [(call.call_id, call.tool, call.arguments) for call in paused.calls] == [("call_dep", "deploy", {"env": "prod"})]
    assert paused.requested_by == "U1"
    assert tool.runs == []

    outcome = await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id="call_dep", approved=True, actor=REQUESTER,
    ))
    assert outcome.outcome == "ready"
    after = await resumed(engine, paused.continuation_id)
    assert tool.runs == [{"env": "prod"}]
    assert last_done(after).answer == "Deployed to prod."
    assert_valid_chat_request(openai_emulator.chat_requests[-1])
    assert tool_messages(openai_emulator.chat_requests[-1]) == {"call_dep": "deployed prod"}
    row = await ContinuationStore(db).get(uuid.UUID(paused.continuation_id))
    assert row is not None and row.status == "done"

    again = await resumed(engine, paused.continuation_id)
    assert len(again) == 1 and isinstance(again[0], Failed) and "already handled by Ada" in again[0].message
    assert tool.runs == [{"env": "prod"}]


async def test_a_rejection_with_a_comment_is_what_the_model_hears(db: Database, openai_emulator: OpenAIEmulator) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = engine_with(db, openai_emulator, tool)
    paused = await pause(engine, openai_emulator, deploy_call(), Text("Understood, not deploying."), channel="C-reject")
    outcome = await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id=None, approved=False, actor=REQUESTER, comment="not on a Friday",
    ))
    assert outcome.outcome == "ready"
    after = await resumed(engine, paused.continuation_id)
    assert tool.runs == []
    assert [e.status for e in after if isinstance(e, ToolCallFinished)] == ["rejected"]
    assert last_done(after).answer == "Understood, not deploying."
    assert_valid_chat_request(openai_emulator.chat_requests[-1])
    heard = tool_messages(openai_emulator.chat_requests[-1])["call_dep"]
    assert "declined" in heard and "not on a Friday" in heard


async def test_two_pending_calls_decided_one_by_one_resume_once(db: Database, openai_emulator: OpenAIEmulator) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = engine_with(db, openai_emulator, tool)
    two = ToolCalls([Call("deploy", '{"env": "prod"}', id="call_p"), Call("deploy", '{"env": "dev"}', id="call_d")])
    paused = await pause(engine, openai_emulator, two, Text("Prod done, dev skipped."), channel="C-two")
    assert [call.call_id for call in paused.calls] == ["call_p", "call_d"]

    first = await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id="call_p", approved=True, actor=REQUESTER,
    ))
    assert first.outcome == "recorded" and first.view is not None and [c.call_id for c in first.view.undecided] == ["call_d"]
    early = await resumed(engine, paused.continuation_id)
    assert len(early) == 1 and isinstance(early[0], Failed) and tool.runs == []
    again = await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id="call_p", approved=False, actor=REQUESTER,
    ))
    assert again.reason == "already_decided"
    second = await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id="call_d", approved=False, actor=REQUESTER, comment="no",
    ))
    assert second.outcome == "ready"

    requests_before = len(openai_emulator.chat_requests)
    after = await resumed(engine, paused.continuation_id)
    assert tool.runs == [{"env": "prod"}]
    assert {e.call_id: e.status for e in after if isinstance(e, ToolCallFinished)} == {"call_p": "ok", "call_d": "rejected"}
    assert last_done(after).answer == "Prod done, dev skipped."
    assert len(openai_emulator.chat_requests) == requests_before + 1
    body = openai_emulator.chat_requests[-1]
    assert_valid_chat_request(body)
    results = tool_messages(body)
    assert results["call_p"] == "deployed prod" and "declined" in results["call_d"]


async def test_a_new_engine_on_the_same_database_resumes_after_a_restart(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    paused = await pause(engine_with(db, openai_emulator, tool), openai_emulator, deploy_call("eu"), Text("EU deployed."), channel="C-restart")
    restarted = engine_with(db, openai_emulator, tool)
    outcome = await restarted.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id="call_dep", approved=True, actor=REQUESTER,
    ))
    assert outcome.outcome == "ready"
    after = await resumed(restarted, paused.continuation_id)
    assert tool.runs == [{"env": "eu"}]
    assert last_done(after).answer == "EU deployed."
    # The whole resumed turn is in the conversation's history: a later question sees it.
    openai_emulator.script(Text("Yes."))
    await events_of(restarted, request("did it work?", channel="C-restart"))
    body = openai_emulator.chat_requests[-1]
    assert_valid_chat_request(body)
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]


async def test_twenty_concurrent_resumes_run_the_tool_exactly_once(db: Database, openai_emulator: OpenAIEmulator) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = engine_with(db, openai_emulator, tool)
    paused = await pause(engine, openai_emulator, deploy_call(), Text("Deployed once."), channel="C-stampede")
    assert (await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id=None, approved=True, actor=REQUESTER,
    ))).outcome == "ready"
    clickers = [Actor(id="U1", name=f"click-{i}") for i in range(20)]
    outcomes = await asyncio.gather(*(resumed(engine, paused.continuation_id, actor) for actor in clickers))
    assert tool.runs == [{"env": "prod"}]
    winners = [events for events in outcomes if isinstance(events[-1], Done)]
    losers = [events for events in outcomes if not isinstance(events[-1], Done)]
    assert len(winners) == 1 and len(losers) == 19
    for events in losers:
        assert len(events) == 1 and isinstance(events[0], Failed)
        assert "already handled by click-" in events[0].message


async def test_an_unauthorised_actor_is_refused_and_the_tool_never_runs(db: Database, openai_emulator: OpenAIEmulator) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = engine_with(db, openai_emulator, tool)
    paused = await pause(engine, openai_emulator, deploy_call(), channel="C-refuse")
    outcome = await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id=None, approved=True, actor=STRANGER,
    ))
    assert outcome.reason == "not_allowed" and outcome.message.startswith("Only U1 (who asked)")
    refused = await resumed(engine, paused.continuation_id, STRANGER)
    assert len(refused) == 1 and isinstance(refused[0], Failed)
    sneaky = [event async for event in resumed_run(engine, paused.continuation_id, {"call_dep": True}, actor=STRANGER)]
    assert len(sneaky) == 1 and isinstance(sneaky[0], Failed) and sneaky[0].message.startswith("Only")
    assert tool.runs == []
    row = await ContinuationStore(db).get(uuid.UUID(paused.continuation_id))
    assert row is not None and row.status == "pending" and row.decisions == {}


async def test_an_approver_from_settings_may_decide(db: Database, openai_emulator: OpenAIEmulator) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = engine_with(db, openai_emulator, tool, approvers=("U9",))
    paused = await pause(engine, openai_emulator, deploy_call(), Text("Approved by the lead."), channel="C-approver")
    lead = Actor(id="U9", name="Lead")
    assert (await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id=None, approved=True, actor=lead,
    ))).outcome == "ready"
    after = await resumed(engine, paused.continuation_id, lead)
    assert tool.runs == [{"env": "prod"}] and last_done(after).answer == "Approved by the lead."


async def test_a_message_while_paused_is_answered_with_a_valid_request(db: Database, openai_emulator: OpenAIEmulator) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = engine_with(db, openai_emulator, tool)
    openai_emulator.script(Text("Earlier answer."))
    await events_of(engine, request("earlier question", channel="C-busy"))
    paused = await pause(engine, openai_emulator, deploy_call(), channel="C-busy")
    openai_emulator.script(Text("Here is the weather."))
    events = await events_of(engine, request("what is the weather?", channel="C-busy"))
    assert last_done(events).answer == "Here is the weather."
    body = openai_emulator.chat_requests[-1]
    assert_valid_chat_request(body)
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    assert body["messages"][-1]["content"] == "what is the weather?"

    # The approval stays valid, and its resumed request is valid too.
    openai_emulator.script(Text("Deployed after all."))
    assert (await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id=None, approved=True, actor=REQUESTER,
    ))).outcome == "ready"
    after = await resumed(engine, paused.continuation_id)
    assert last_done(after).answer == "Deployed after all." and tool.runs == [{"env": "prod"}]
    assert_valid_chat_request(openai_emulator.chat_requests[-1])
    openai_emulator.script(Text("Fine."))
    await events_of(engine, request("and now?", channel="C-busy"))
    assert_valid_chat_request(openai_emulator.chat_requests[-1])


async def test_an_expired_approval_says_so_and_comes_back_with_its_messages_to_edit(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = engine_with(db, openai_emulator, tool)
    paused = await pause(engine, openai_emulator, deploy_call(), channel="C-expire")
    key = uuid.UUID(paused.continuation_id)
    await ContinuationStore(db).add_message_ref(key, {"channel": "C-expire", "ts": "1.0"})
    async with db.connection() as conn:
        await conn.execute("UPDATE continuations SET expires_at = now() - interval '1 second' WHERE id = %s", (key,))

    outcome = await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id=None, approved=True, actor=REQUESTER,
    ))
    assert outcome.outcome == "expired" and "expired" in outcome.message
    [expired] = await engine.approvals.expire_due()
    assert expired.platform == "test" and expired.message_refs == [{"channel": "C-expire", "ts": "1.0"}]
    assert expired.view.continuation_id == paused.continuation_id and expired.view.state == "expired"
    assert [(c.tool, c.arguments) for c in expired.view.calls] == [("deploy", {"env": "prod"})]
    assert await engine.approvals.expire_due() == []
    late = await resumed(engine, paused.continuation_id)
    assert len(late) == 1 and isinstance(late[0], Failed) and "expired" in late[0].message
    assert tool.runs == []


async def test_a_tiny_expiry_setting_expires_the_approval(db: Database, openai_emulator: OpenAIEmulator) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = engine_with(db, openai_emulator, tool, approval_expiry_s=0.05)
    paused = await pause(engine, openai_emulator, deploy_call(), channel="C-tiny")
    await asyncio.sleep(0.1)
    outcome = await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id="call_dep", approved=True, actor=REQUESTER,
    ))
    assert outcome.outcome == "expired"
    assert tool.runs == []


async def test_a_run_stuck_in_resuming_is_reverted_and_its_started_call_never_runs_again(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = engine_with(db, openai_emulator, tool)
    paused = await pause(engine, openai_emulator, deploy_call(), channel="C-stuck")
    key = uuid.UUID(paused.continuation_id)
    assert (await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id=None, approved=True, actor=REQUESTER,
    ))).outcome == "ready"
    # A crash after the claim and after the call was marked started, before it finished.
    assert await ContinuationStore(db).claim(key, actor="crashed-instance") is not None
    assert await ContinuationStore(db).mark_started(key, "call_dep")
    assert await engine.approvals.revert_stuck(older_than_s=3600) == 0
    async with db.connection() as conn:
        await conn.execute("UPDATE continuations SET claimed_at = now() - interval '1 hour' WHERE id = %s", (key,))
    assert await engine.approvals.revert_stuck(older_than_s=600) == 1

    openai_emulator.script(Text("I could not confirm the deploy."))
    after = await resumed(engine, paused.continuation_id)
    assert tool.runs == []
    assert [e.status for e in after if isinstance(e, ToolCallFinished)] == ["error"]
    assert "outcome is unknown" in tool_messages(openai_emulator.chat_requests[-1])["call_dep"]
    assert last_done(after).answer == "I could not confirm the deploy."


def test_a_click_is_one_value_that_click_and_decide_take_whole() -> None:
    """One signature, no keyword chain: a platform builds a Click and hands it over as it is."""
    for method in (ApprovalService.click, ApprovalService.decide):
        assert list(inspect.signature(method).parameters) == ["self", "click"], method
    click = Click(continuation_id=str(uuid.uuid4()), approved=True, actor=REQUESTER, among=("call_a",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        click.approved = False  # type: ignore[misc]
    assert click.call_id is None and click.call_index is None and click.admins and click.mention("U1") == "U1"
