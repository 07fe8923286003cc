"""Every saved run-state schema version still loads, stores as a continuation and resumes to an answer."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from core.agents.state import RUN_STATE_SCHEMA_VERSION, RunState, RunStateError
from core.approvals import Click
from core.events import Done, Sources, ToolCallFinished
from core.requests import Actor
from core.store.continuations import ContinuationStore, StoredCall
from core.store.db import Database
from tests.core.engine.support import resumed_run, RecordingTool, assert_valid_chat_request, registry_with, tool_messages
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine

RUN_STATES = Path(__file__).resolve().parents[2] / "fixtures" / "run_states"
SAVED = sorted(RUN_STATES.glob("v*.json"))


def test_there_is_a_saved_state_for_the_current_schema_version() -> None:
    assert RUN_STATES / f"v{RUN_STATE_SCHEMA_VERSION}.json" in SAVED


def test_an_unknown_schema_version_is_refused_with_a_sentence() -> None:
    data = json.loads((RUN_STATES / "v1.json").read_text())
    with pytest.raises(RunStateError, match="schema version 999"):
        RunState.from_json({**data, "schema_version": 999})


@pytest.mark.parametrize("path", SAVED, ids=lambda path: path.stem)
async def test_a_saved_state_loads_and_resumes_to_an_answer(
    path: Path, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    data = json.loads(path.read_text())
    state = RunState.from_json(data)
    assert state.pending and state.sources
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    state.conversation_id = await engine.conversations.get_or_create(state.conversation)
    call_ids = tuple(call.call_id for call in state.pending)
    continuation_id = await ContinuationStore(db).save(
        conversation_id=state.conversation_id,
        schema_version=data["schema_version"],
        state={**data, "conversation_id": state.conversation_id},
        calls=tuple(StoredCall(call_id=c.call_id, tool=c.tool, arguments=c.arguments) for c in state.pending),
        requested_by=state.user_id,
        expires_at=datetime.now(timezone.utc) + timedelta(hours=1),
        platform=state.conversation.platform,
    )
    requester = Actor(id=state.user_id, name=state.user_name)
    outcome = await engine.approvals.decide(Click(
        continuation_id=str(continuation_id), call_id=None, approved=True, actor=requester,
    ))
    assert outcome.outcome == "ready"

    openai_emulator.script(Text("Deployed, see [1]."))
    events = [event async for event in resumed_run(engine, str(continuation_id), actor=requester)]
    assert len(tool.runs) == len(call_ids)
    assert [e.status for e in events if isinstance(e, ToolCallFinished)] == ["ok"] * len(call_ids)
    sources = [e for e in events if isinstance(e, Sources)]
    assert sources and sources[0].items == tuple(state.sources)
    done = events[-1]
    assert isinstance(done, Done) and done.answer == state.answer_so_far + "Deployed, see [1]."
    body = openai_emulator.chat_requests[-1]
    assert_valid_chat_request(body)
    assert set(tool_messages(body)) == set(call_ids)
    assert [tool["function"]["name"] for tool in body["tools"]] == state.offered_tools
