"""An approval a crash left with a started call, reverted and then expired, never says that nothing ran."""

from __future__ import annotations

import uuid

from adapters import wording as shared_wording
from core import wording
from core.approvals import Click
from core.events import Failed, ToolRun
from core.requests import Actor
from core.store.continuations import ContinuationStore
from core.store.db import Database
from tests.core.engine.support import RecordingTool, approval, events_of, registry_with, request, resumed_run
from tests.emulators.openai_server import Call, OpenAIEmulator, ToolCalls
from tests.support.engine import make_engine

ADA = Actor(id="U1", name="Ada")


async def test_an_approval_reverted_after_its_call_started_and_then_expired_says_the_call_had_started(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    two = ToolCalls([Call("deploy", '{"env": "prod"}', id="call_p"), Call("deploy", '{"env": "dev"}', id="call_d")])
    openai_emulator.script(two)
    paused = approval(await events_of(engine, request("please deploy", channel="C-expired-start")))
    key = uuid.UUID(paused.continuation_id)
    store = ContinuationStore(db)
    assert (await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id=None, approved=True, actor=ADA,
    ))).outcome == "ready"
    # A process claimed the run, started the prod deploy and died; the stuck-run job reverted it.
    assert await store.claim(key, actor="crashed-instance") is not None
    assert await store.mark_started(key, "call_p")
    async with db.connection() as conn:
        await conn.execute("UPDATE continuations SET claimed_at = now() - interval '1 hour' WHERE id = %s", (key,))
    assert await engine.approvals.revert_stuck(older_than_s=600) == 1
    async with db.connection() as conn:
        await conn.execute("UPDATE continuations SET expires_at = now() - interval '1 second' WHERE id = %s", (key,))

    [expired] = await engine.approvals.expire_due()
    assert expired.view.state == "expired" and expired.view.started == ("call_p",)
    assert expired.view.started_tools == ("deploy",)
    line = shared_wording.approval_expired_line(expired.view.started_tools)
    assert "nothing was run" not in line and "`deploy` had already started" in line and "outcome is unknown" in line

    late = [event async for event in resumed_run(engine, paused.continuation_id, actor=ADA)]
    assert len(late) == 1 and isinstance(late[0], Failed)
    assert late[0].message == wording.approval_expired_after_start(("deploy",))
    assert "nothing was run" not in late[0].message
    assert tool.runs == []


async def test_an_approval_that_expired_untouched_still_says_nothing_ran(db: Database, openai_emulator: OpenAIEmulator) -> None:
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(RecordingTool(requires_approval=True)))
    openai_emulator.script(ToolCalls([Call("deploy", '{"env": "prod"}', id="call_p")]))
    paused = approval(await events_of(engine, request("please deploy", channel="C-expired-plain")))
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE continuations SET expires_at = now() - interval '1 second' WHERE id = %s", (uuid.UUID(paused.continuation_id),)
        )
    [expired] = await engine.approvals.expire_due()
    assert expired.view.started == () and expired.view.started_tools == ()
    assert shared_wording.approval_expired_line(()) == shared_wording.approval_expired()
    late = await engine.approvals.decide(Click(
        continuation_id=paused.continuation_id, call_id=None, approved=True, actor=ADA,
    ))
    assert late.outcome == "expired" and late.message == wording.approval_expired()


def test_what_ran_is_listed_with_its_outcome_and_the_retry_advice_is_dropped() -> None:
    ran = [
        ToolRun(call_id="a", tool="deploy", status="ok", output_preview="deployed\nto   prod"),
        ToolRun(call_id="b", tool="migrate", status="error", output_preview="x" * 500),
        ToolRun(call_id="c", tool="notify"),
        ToolRun(call_id="d", tool="page", status="ok", output_preview=""),
    ]
    text = wording.stopped_after_tools(ran, wording.model_server_error())
    assert text.startswith("`deploy` ran (ok: deployed to prod); `migrate` ran but failed (error: xxx")
    assert "`notify` started, but its outcome is unknown; and 1 more; then I had to stop: " in text
    assert "page" not in text and "try again" not in text.lower()
    assert text.endswith("internal error. Ask me to continue rather than to run them again.")
    assert len(text) < 500
    one = wording.stopped_after_tools(ran[:1], wording.database_unavailable())
    assert one == (
        "`deploy` ran (ok: deployed to prod); then I had to stop: I can't reach my database right now, so I can't answer."
        " Ask me to continue rather than to run it again."
    )
