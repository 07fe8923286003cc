"""Discord approvals end to end: buttons, policy on every click, exactly-once resume, restarts, expiry."""

from __future__ import annotations

import asyncio

import pytest

from adapters.discord.surface import DiscordSurface
from bot.jobs import expire_approvals
from core.store.db import Database
from tests.adapters.discord.harness import (
    DeployTool,
    World,
    approval_message,
    bot_messages,
    button_ids,
    make_world,
    running_bot,
)
from tests.emulators.discord import DiscordEmulator, StoredMessage
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.click_path import MAX_CLICK_PATH_MODULES, StackRecorder

DEPLOY = ToolCalls([Call("deploy", '{"env": "prod"}')])


async def ask_in_thread(dc: DiscordEmulator, w: World, question: str = "deploy please") -> int:
    asked = await dc.send_user_message(w.channel_id, w.alice, question, mentions_bot=True)
    thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
    return thread.id


async def wait_approval(dc: DiscordEmulator, channel_id: int) -> StoredMessage:
    return await dc.wait_for(lambda: approval_message(dc, channel_id), what="approval message")


def ephemeral_texts(dc: DiscordEmulator, interaction_id: int) -> list[str]:
    return [r.content or "" for r in dc.interaction_responses(interaction_id) if r.ephemeral]


async def test_approve_runs_the_tool_and_streams_the_rest(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    openai_emulator.script(DEPLOY, Text("Deployed to prod."))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry()):
        thread_id = await ask_in_thread(dc, w)
        approval = await wait_approval(dc, thread_id)
        assert tool.runs == []
        approve, reject = button_ids(approval)
        clicked = await dc.click_button(approval.id, approve, w.alice)
        await dc.wait_for(lambda: any("Deployed to prod." in m.content for m in bot_messages(dc, thread_id)), what="resumed")
    assert tool.runs == [{"env": "prod"}]
    edited = dc.message(approval.id)
    assert "deploy" in edited.history[0] and '"env": "prod"' in edited.history[0] and f"<@{w.alice}>" in edited.history[0]
    assert approval.allowed_mentions is not None and approval.allowed_mentions["parse"] == []
    assert "✅ Approved by alice" in edited.content
    assert button_ids(edited, enabled_only=True) == []
    assert dc.interaction_responses(clicked)[0].callback_type == 6  # deferred update, within 3 s
    assert bot_messages(dc, thread_id)[-1].content == "Deployed to prod."


async def test_reject_runs_nothing(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    openai_emulator.script(DEPLOY, Text("Understood, not deploying."))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry()):
        thread_id = await ask_in_thread(dc, w)
        approval = await wait_approval(dc, thread_id)
        await dc.click_button(approval.id, button_ids(approval)[1], w.alice)
        await dc.wait_for(
            lambda: bot_messages(dc, thread_id)[-1].content == "Understood, not deploying.", what="resumed"
        )
    assert tool.runs == []
    assert "❌ Rejected by alice" in dc.message(approval.id).content


async def test_unauthorised_click_is_refused_and_runs_nothing(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    approver_role = dc.add_role(w.guild_id, "deployers")
    carol = dc.add_user("carol", roles=[approver_role])
    openai_emulator.script(DEPLOY, Text("Done."))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry(), approver_roles=(str(approver_role),)):
        thread_id = await ask_in_thread(dc, w)
        approval = await wait_approval(dc, thread_id)
        refused = await dc.click_button(approval.id, button_ids(approval)[0], w.bob)
        await dc.wait_for(lambda: ephemeral_texts(dc, refused), what="refusal")
        assert tool.runs == [] and dc.message(approval.id).edit_count == 0
        # Someone holding an approver role may decide.
        await dc.click_button(approval.id, button_ids(approval)[0], carol)
        await dc.wait_for(lambda: bot_messages(dc, thread_id)[-1].content == "Done.", what="resumed")
    assert ephemeral_texts(dc, refused)[0].startswith("Only ")
    assert f"<@{w.alice}> (who asked)" in ephemeral_texts(dc, refused)[0]  # people named the Discord way
    assert tool.runs == [{"env": "prod"}]
    assert "✅ Approved by carol" in dc.message(approval.id).content


async def test_two_pending_calls_are_decided_separately(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    two = ToolCalls([Call("deploy", '{"env": "staging"}'), Call("deploy", '{"env": "prod"}')])
    openai_emulator.script(two, Text("Staging only."))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry()):
        thread_id = await ask_in_thread(dc, w)
        approval = await wait_approval(dc, thread_id)
        ids = button_ids(approval)
        assert len(ids) == 6  # approve/reject per call, then approve all / reject all
        await dc.click_button(approval.id, ids[0], w.alice)  # approve call 1
        await dc.wait_for(lambda: "1. ✅ Approved by alice" in dc.message(approval.id).content, what="first decision")
        assert tool.runs == []
        assert button_ids(dc.message(approval.id), enabled_only=True) == ids[2:]
        await dc.click_button(approval.id, ids[3], w.alice)  # reject call 2
        await dc.wait_for(lambda: bot_messages(dc, thread_id)[-1].content == "Staging only.", what="resumed")
    assert tool.runs == [{"env": "staging"}]
    final = dc.message(approval.id).content
    assert "1. ✅ Approved by alice" in final and "2. ❌ Rejected by alice" in final


async def test_twenty_concurrent_clicks_run_the_tool_once(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    openai_emulator.script(DEPLOY, Text("Deployed once."))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry(), approvers=(str(w.bob),)):
        thread_id = await ask_in_thread(dc, w)
        approval = await wait_approval(dc, thread_id)
        approve = button_ids(approval)[0]
        clicks = await asyncio.gather(
            *(dc.click_button(approval.id, approve, w.alice if i % 2 else w.bob) for i in range(20))
        )
        await dc.wait_for(lambda: any(m.content == "Deployed once." for m in bot_messages(dc, thread_id)), what="resumed")
        await dc.wait_for(lambda: all(dc.interaction_responses(c) for c in clicks), what="every click answered")
    assert tool.runs == [{"env": "prod"}]
    assert [m.content for m in bot_messages(dc, thread_id)].count("Deployed once.") == 1
    assert len(openai_emulator.chat_requests) == 2


async def test_click_after_a_restart_still_resumes(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    openai_emulator.script(DEPLOY, Text("Deployed after restart."))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry()):
        thread_id = await ask_in_thread(dc, w)
        approval = await wait_approval(dc, thread_id)
    # A new process: new engine, new adapter, same database; the buttons are the old ones.
    async with running_bot(dc, db, openai_emulator, registry=tool.registry()):
        await dc.click_button(approval.id, button_ids(approval)[0], w.alice)
        await dc.wait_for(
            lambda: any(m.content == "Deployed after restart." for m in bot_messages(dc, thread_id)), what="resumed"
        )
    assert tool.runs == [{"env": "prod"}]
    assert "✅ Approved by alice" in dc.message(approval.id).content


async def test_expiry_edits_the_message_and_a_late_click_is_told(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    openai_emulator.script(DEPLOY)
    async with running_bot(dc, db, openai_emulator, registry=tool.registry(), approval_expiry_s=0.5) as (adapter, engine):
        thread_id = await ask_in_thread(dc, w)
        approval = await wait_approval(dc, thread_id)
        await asyncio.sleep(0.6)
        assert await expire_approvals(engine.approvals, {"discord": adapter.notifier}) == 1
        await dc.wait_for(lambda: "⌛" in dc.message(approval.id).content, what="expired edit")
        late = await dc.click_button(approval.id, button_ids(approval)[0], w.alice, allow_disabled=True)
        await dc.wait_for(lambda: ephemeral_texts(dc, late), what="late click answer")
    assert button_ids(dc.message(approval.id), enabled_only=True) == []
    assert "expired" in ephemeral_texts(dc, late)[0]
    assert tool.runs == []


async def test_a_click_reaches_the_resumed_run_through_at_most_four_project_modules(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    recorder = StackRecorder()
    monkeypatch.setattr(DiscordSurface, "show_working", recorder.wrap(DiscordSurface.show_working))
    openai_emulator.script(DEPLOY, Text("Deployed along a short path."))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry()):
        thread_id = await ask_in_thread(dc, w)
        approval = await wait_approval(dc, thread_id)
        asked = len(recorder.stacks)
        await dc.click_button(approval.id, button_ids(approval)[0], w.alice)
        await dc.wait_for(
            lambda: any(m.content == "Deployed along a short path." for m in bot_messages(dc, thread_id)), what="resumed"
        )
    [path] = recorder.stacks[asked:]
    # The button hands the click to the click handler, which asks core/approvals.py once and gives the run to the runner.
    assert path == [
        "adapters/discord/buttons.py", "adapters/discord/clicks.py", "adapters/answers.py", "adapters/discord/surface.py"
    ]
    assert len(path) <= MAX_CLICK_PATH_MODULES
