"""A click that contradicts a decision already recorded is refused with who decided, never taken as 'ready'."""

from __future__ import annotations

from core.approvals import Click
from core.engine import Engine
from core.events import Done, ToolCallFinished
from core.requests import Actor
from core.store.db import Database
from tests.core.engine.support import resumed_run, RecordingTool, approval, events_of, registry_with, request
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine

ADA = Actor(id="U1", name="Ada")
BOB = Actor(id="U7", name="Bob")


async def paused(db: Database, emulator: OpenAIEmulator, tool: RecordingTool, channel: str) -> tuple[Engine, str]:
    engine = make_engine(db, emulator.base_url, registry=registry_with(tool), approvers=["U7"])
    emulator.script(ToolCalls([Call("deploy", '{"env": "prod"}', id="call_dep")]), Text("Deployed."))
    return engine, approval(await events_of(engine, request("please deploy", channel=channel))).continuation_id


async def test_a_reject_after_an_approve_of_the_same_call_is_refused_naming_who_approved(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine, continuation_id = await paused(db, openai_emulator, tool, "C-conflict-one")
    first = await engine.approvals.decide(Click(
        continuation_id=continuation_id, call_id="call_dep", approved=True, actor=ADA,
    ))
    assert first.outcome == "ready"
    second = await engine.approvals.decide(Click(
        continuation_id=continuation_id, call_id="call_dep", approved=False, actor=BOB,
    ))
    assert second.reason == "already_decided"
    assert "Ada" in second.message
    # The first click still resumes the run, with Ada's decision.
    events = [event async for event in resumed_run(engine, continuation_id, actor=ADA)]
    assert isinstance(events[-1], Done)
    assert tool.runs == [{"env": "prod"}]


async def test_reject_all_after_every_call_was_approved_is_refused_naming_who_approved(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine, continuation_id = await paused(db, openai_emulator, tool, "C-conflict-all")
    assert (await engine.approvals.decide(Click(
        continuation_id=continuation_id, call_id="call_dep", approved=True, actor=ADA,
    ))).outcome == "ready"
    outcome = await engine.approvals.decide(Click(
        continuation_id=continuation_id, call_id=None, approved=False, actor=BOB,
    ))
    assert outcome.reason == "already_decided"
    assert "Ada" in outcome.message


async def test_the_same_decision_clicked_twice_is_still_ready_so_a_reverted_run_can_be_resumed(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine, continuation_id = await paused(db, openai_emulator, tool, "C-conflict-same")
    assert (await engine.approvals.decide(Click(
        continuation_id=continuation_id, call_id="call_dep", approved=True, actor=ADA,
    ))).outcome == "ready"
    assert (await engine.approvals.decide(Click(
        continuation_id=continuation_id, call_id="call_dep", approved=True, actor=BOB,
    ))).outcome == "ready"
    assert (await engine.approvals.decide(Click(
        continuation_id=continuation_id, call_id=None, approved=True, actor=BOB,
    ))).outcome == "ready"
    events = [event async for event in resumed_run(engine, continuation_id, actor=BOB)]
    assert [e.status for e in events if isinstance(e, ToolCallFinished)] == ["ok"]
    assert tool.runs == [{"env": "prod"}]


async def test_approve_all_covers_only_the_calls_the_approver_was_shown(db: Database, openai_emulator: OpenAIEmulator) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    three = ToolCalls([Call("deploy", f'{{"env": "{env}"}}', id=f"call_{env}") for env in ("a", "b", "c")])
    openai_emulator.script(three, Text("Done."))
    continuation_id = approval(await events_of(engine, request("deploy three", channel="C-shown"))).continuation_id
    shown = await engine.approvals.click(Click(
        continuation_id=continuation_id, call_id=None, among=("call_a", "call_b"), approved=True, actor=ADA,
    ))
    assert shown.outcome == "recorded" and shown.events is None and tool.runs == []
    assert shown.view is not None and [c.call_id for c in shown.view.undecided] == ["call_c"]
    rest = await engine.approvals.click(Click(
        continuation_id=continuation_id, call_id=None, among=("call_c",), approved=False, actor=ADA,
    ))
    assert rest.claimed and rest.events is not None
    events = [event async for event in rest.events]
    assert tool.runs == [{"env": "a"}, {"env": "b"}] and isinstance(events[-1], Done)


async def test_a_refusal_on_a_platform_without_an_admin_rule_does_not_mention_admins(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine, continuation_id = await paused(db, openai_emulator, tool, "C-no-admins")
    stranger = Actor(id="U9", name="Eve")
    slack_like = await engine.approvals.click(Click(
        continuation_id=continuation_id, call_id="call_dep", approved=True, actor=stranger, admins=False,
    ))
    discord_like = await engine.approvals.click(Click(
        continuation_id=continuation_id, call_id="call_dep", approved=True, actor=stranger,
    ))
    assert slack_like.reason == "not_allowed" and "admin" not in slack_like.message
    assert discord_like.message.endswith("or an admin can approve or reject this.")
