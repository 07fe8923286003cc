"""What a run leaves behind for operators: one answer line, tool and approval audit lines, metrics, and its tokens in Postgres."""

from __future__ import annotations

import asyncio

import pytest

from core.approvals import Click
from core.events import ApprovalRequired, Done, Failed
from core.requests import Actor
from core.store.db import Database
from core.store.usage import UsageLog
from tests.core.engine.support import RecordingTool, events_of, registry_with, request, resumed_run
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine
from tests.support.observe import record_reported_usage, records_with, run_context_on, sample

ADA = Actor(id="U1", name="Ada")
BOB = Actor(id="U2", name="Bob")
MODEL = "test-model"


def deploy(call_id: str = "call_1") -> ToolCalls:
    return ToolCalls([Call("deploy", '{"env": "prod"}', id=call_id)])


async def usage_of(db: Database, channel: str) -> tuple[int, int, int]:
    """(turns, tokens in, tokens out) stored for one channel."""
    for line in await UsageLog(db).report(by="channel"):
        if dict(line.group)["channel"] == channel:
            return line.turns, line.tokens_in, line.tokens_out
    return 0, 0, 0


async def test_an_answer_writes_one_line_with_its_numbers_audits_its_tool_and_stores_its_tokens(
    db: Database, openai_emulator: OpenAIEmulator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reported = record_reported_usage(monkeypatch)
    tool = RecordingTool()
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    openai_emulator.script(deploy(), Text("Deployed to prod."))
    answered = sample("relaybot_answers_total", platform="test", outcome="answered")
    tokens_in = sample("relaybot_tokens_total", platform="test", model=MODEL, direction="in")
    first_tokens = sample("relaybot_model_first_token_seconds_count", platform="test", model=MODEL)
    totals = sample("relaybot_model_total_seconds_count", platform="test", model=MODEL)
    tool_ok = sample("relaybot_tool_runs_total", tool="deploy", outcome="ok")

    with run_context_on(caplog):
        events = await events_of(engine, request("deploy please", channel="C-obs-answer"))

    assert isinstance(events[-1], Done)
    assert len(reported.reports) == 2  # the tool call, then the answer
    [line] = records_with(caplog, event="answer")
    assert line.outcome == "answered" and line.platform == "test" and line.agent == "classic" and line.model == MODEL
    assert (line.tokens_in, line.tokens_out) == (reported.prompt_tokens, reported.completion_tokens)
    assert line.tools == ["deploy"]
    assert 0 <= line.first_token_s <= line.total_s
    assert line.run_id and line.conversation == "test:W:C-obs-answer"
    # Every line of the run carries its id and conversation: here, the tool's audit line.
    [audit] = records_with(caplog, audit="tool_run")
    assert (audit.tool, audit.outcome, audit.user, audit.user_name) == ("deploy", "ok", "U1", "name-U1")
    assert (audit.run_id, audit.conversation) == (line.run_id, line.conversation)

    assert sample("relaybot_answers_total", platform="test", outcome="answered") == answered + 1
    assert sample("relaybot_tokens_total", platform="test", model=MODEL, direction="in") == tokens_in + reported.prompt_tokens
    assert sample("relaybot_model_first_token_seconds_count", platform="test", model=MODEL) == first_tokens + 1
    assert sample("relaybot_model_total_seconds_count", platform="test", model=MODEL) == totals + 1
    assert sample("relaybot_tool_runs_total", tool="deploy", outcome="ok") == tool_ok + 1
    assert await usage_of(db, "C-obs-answer") == (1, reported.prompt_tokens, reported.completion_tokens)


async def test_a_turn_paused_for_approval_is_one_usage_row_and_every_decision_is_audited(
    db: Database, openai_emulator: OpenAIEmulator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reported = record_reported_usage(monkeypatch)
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    openai_emulator.script(deploy(), Text("Deployed."))
    paused = sample("relaybot_answers_total", platform="test", outcome="approval")
    approved = sample("relaybot_approvals_total", decision="approved")
    refused = sample("relaybot_approvals_total", decision="refused")

    with run_context_on(caplog):
        events = await events_of(engine, request("deploy please", channel="C-obs-pause"))
        pause = events[-1]
        assert isinstance(pause, ApprovalRequired)
        first_part = (reported.prompt_tokens, reported.completion_tokens)
        assert await usage_of(db, "C-obs-pause") == (1, *first_part)

        stranger = await engine.approvals.click(Click(continuation_id=pause.continuation_id, approved=True, actor=BOB))
        assert stranger.outcome == "refused"
        resumed = [event async for event in resumed_run(engine, pause.continuation_id, {"call_1": True}, actor=ADA)]
    assert isinstance(resumed[-1], Done)

    # The paused part and the resumed part add up in the turn's one row.
    assert await usage_of(db, "C-obs-pause") == (1, reported.prompt_tokens, reported.completion_tokens)
    first, second = records_with(caplog, event="answer")
    assert first.outcome == "approval" and (first.tokens_in, first.tokens_out) == first_part
    assert second.outcome == "answered" and second.tools == ["deploy"]
    assert first.tokens_in + second.tokens_in == reported.prompt_tokens
    assert first.run_id != second.run_id and first.conversation == second.conversation == "test:W:C-obs-pause"

    refusal, decision = records_with(caplog, audit="approval")
    assert (refusal.actor, refusal.decision, refusal.outcome, refusal.reason) == ("U2", "approved", "refused", "not_allowed")
    assert (decision.actor, decision.decision, decision.tools, decision.outcome) == ("U1", "approved", ["deploy"], "ready")
    assert sample("relaybot_answers_total", platform="test", outcome="approval") == paused + 1
    assert sample("relaybot_approvals_total", decision="approved") == approved + 1
    assert sample("relaybot_approvals_total", decision="refused") == refused + 1


async def test_a_failed_run_still_counts_the_tokens_it_used(
    db: Database, openai_emulator: OpenAIEmulator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reported = record_reported_usage(monkeypatch)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(RecordingTool()), agent_loop_limit=1)
    openai_emulator.script(deploy())  # a tool round, then the loop limit: the run fails after one model call
    failed = sample("relaybot_answers_total", platform="test", outcome="failed")

    with run_context_on(caplog):
        events = await events_of(engine, request("deploy please", channel="C-obs-failed"))

    assert isinstance(events[-1], Failed)
    [line] = records_with(caplog, event="answer")
    assert line.outcome == "failed" and (line.tokens_in, line.tokens_out) == (reported.prompt_tokens, reported.completion_tokens)
    assert sample("relaybot_answers_total", platform="test", outcome="failed") == failed + 1
    assert await usage_of(db, "C-obs-failed") == (1, reported.prompt_tokens, reported.completion_tokens)


async def test_an_unknown_agent_type_is_a_failed_answer_of_no_tokens(
    db: Database, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(db, openai_emulator.base_url)
    failed = sample("relaybot_answers_total", platform="test", outcome="failed")
    with run_context_on(caplog):
        events = await events_of(engine, request("hi", channel="C-obs-unknown", agent_type="psychic"))
    assert isinstance(events[-1], Failed)
    [line] = records_with(caplog, event="answer")
    assert line.outcome == "failed" and line.tokens_in == 0 and line.conversation == "test:W:C-obs-unknown"
    assert sample("relaybot_answers_total", platform="test", outcome="failed") == failed + 1
    assert openai_emulator.chat_requests == []


async def test_an_expired_approval_is_audited(
    db: Database, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(RecordingTool(requires_approval=True)),
                         approval_expiry_s=0.01)
    openai_emulator.script(deploy())
    pause = (await events_of(engine, request("deploy please", channel="C-obs-expire")))[-1]
    assert isinstance(pause, ApprovalRequired)
    expired = sample("relaybot_approvals_total", decision="expired")
    await asyncio.sleep(0.05)
    caplog.set_level("INFO")
    closed = await engine.approvals.expire_due()
    assert pause.continuation_id in {item.view.continuation_id for item in closed}
    [line] = [r for r in records_with(caplog, audit="approval") if r.continuation_id == pause.continuation_id]
    assert (line.decision, line.outcome, line.tools) == ("expired", "expired", ["deploy"])
    assert sample("relaybot_approvals_total", decision="expired") >= expired + 1
