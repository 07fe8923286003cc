"""The expiry job: closes only the approvals of the platforms this process serves, and has their notifier edit them."""

from __future__ import annotations

import uuid
from typing import Any

from bot.jobs import expire_approvals
from core.approvals import ApprovalView
from core.requests import Actor, ConversationKey, Request
from core.store.db import Database
from tests.core.engine.support import RecordingTool, approval, events_of, registry_with
from tests.emulators.openai_server import Call, OpenAIEmulator, ToolCalls
from tests.support.engine import make_engine


class RecordingNotifier:
    def __init__(self) -> None:
        self.expired: list[tuple[ApprovalView, list[dict[str, Any]]]] = []

    async def approval_expired(self, *, view: ApprovalView, message_refs: list[dict[str, Any]]) -> None:
        self.expired.append((view, message_refs))

    async def deliver_reminder(self, **_: Any) -> None:
        raise AssertionError("no reminder expected")


async def test_expiry_touches_only_the_platforms_served_and_the_notifier_edits_their_messages(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(RecordingTool(requires_approval=True)))
    paused = {}
    for platform in ("slack", "discord", "api"):
        openai_emulator.script(ToolCalls([Call("deploy", '{"env": "prod"}', id=f"call_{platform}")]))
        key = ConversationKey(platform=platform, workspace="W", channel=f"C-{platform}")
        paused[platform] = approval(await events_of(engine, Request(question="deploy", conversation=key, user=Actor(id="U1"))))
        await engine.approvals.remember_message(paused[platform].continuation_id, {"platform": platform, "ts": "1.0"})
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE continuations SET expires_at = now() - interval '1 second' WHERE id = ANY(%s)",
            ([uuid.UUID(p.continuation_id) for p in paused.values()],),
        )

    slack = RecordingNotifier()
    assert await expire_approvals(engine.approvals, {"slack": slack}) == 1
    [(view, refs)] = slack.expired
    assert view.continuation_id == paused["slack"].continuation_id and view.state == "expired"
    assert view.calls[0].arguments == {"env": "prod"} and refs == [{"platform": "slack", "ts": "1.0"}]
    # The Discord approval stays for a process that serves Discord and can edit its message.
    discord = RecordingNotifier()
    assert await expire_approvals(engine.approvals, {"discord": discord}) == 1
    assert [v.continuation_id for v, _ in discord.expired] == [paused["discord"].continuation_id]
    # The HTTP API showed no message: a process serving it closes its approvals, editing nothing.
    assert await expire_approvals(engine.approvals, {}, without_messages=("api",)) == 1
    assert (await engine.approvals.view(paused["api"].continuation_id)).state == "expired"
