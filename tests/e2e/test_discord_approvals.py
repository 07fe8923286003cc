"""Discord approvals end to end: buttons, policy on every click, exactly-once resume, restarts, expiry."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import discord
import pytest

from adapters import wording as shared_wording
from adapters.discord.buttons import DecisionButton
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
from tests.support.click_path import MAX_CLICK_PATH_MODULES, ClickPath

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
        # The final text, not a streamed update of it (its cursor still on): close() cancels an answer still streaming.
        await dc.wait_for(lambda: any(m.content == "Deployed to prod." for m in bot_messages(dc, thread_id)), what="resumed")
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


DISCORD_MESSAGE_WRITES = frozenset({
    ("POST", "/channels/{channel_id}/messages"), ("PATCH", "/channels/{channel_id}/messages/{message_id}"),
})


async def test_a_click_reaches_the_resumed_runs_first_answer_write_through_no_more_modules_than_measured(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    # From the button discord.py builds for the click to the resumed run's first write of its answer, a post or an
    # edit (the approval's own redraw goes through the interaction's webhook, outside a run).
    path = ClickPath(DecisionButton.from_custom_id)
    request = discord.http.HTTPClient.request

    async def noting_writes(http: discord.http.HTTPClient, route: discord.http.Route, **arguments: Any) -> Any:
        if (route.method, route.path) in DISCORD_MESSAGE_WRITES:
            path.written()
        return await request(http, route, **arguments)

    monkeypatch.setattr(discord.http.HTTPClient, "request", noting_writes)
    openai_emulator.script(DEPLOY, Text("Deployed along a measured path."))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry()):
        thread_id = await ask_in_thread(dc, w)
        approval = await wait_approval(dc, thread_id)
        path.arm()
        try:
            await dc.click_button(approval.id, button_ids(approval)[0], w.alice)
            await dc.wait_for(
                lambda: any(m.content == "Deployed along a measured path." for m in bot_messages(dc, thread_id)),
                what="resumed",
            )
        finally:
            path.disarm()
    assert tool.runs == [{"env": "prod"}]
    assert path.path is not None, "the resumed run wrote no message"
    assert path.path[0] == "adapters/discord/buttons.py" and "adapters/discord/clicks.py" in path.path
    assert "core/approvals.py" in path.path and "adapters/answers.py" in path.path
    assert len(path.path) <= MAX_CLICK_PATH_MODULES["discord"], path.report()


def approval_messages(dc: DiscordEmulator, channel_id: int) -> list[StoredMessage]:
    return [m for m in bot_messages(dc, channel_id) if m.components]


def approve_all_id(message: StoredMessage) -> str:
    [found] = [i for i in button_ids(message) if i.startswith("rb:a:") and ":*" in i]
    return found


async def test_many_calls_are_shown_in_several_messages_and_approve_all_covers_only_its_own(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    ten = ToolCalls([Call("deploy", json.dumps({"env": f"env{i}"})) for i in range(10)])
    openai_emulator.script(ten, Text("Eight deployed."))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry()):
        thread_id = await ask_in_thread(dc, w)
        first, second = await dc.wait_for(
            lambda: approval_messages(dc, thread_id) if len(approval_messages(dc, thread_id)) == 2 else None,
            what="two approval messages",
        )
        # Every call is shown, each in the message whose buttons decide it.
        assert all(f"env{i}" in first.content for i in range(8)) and "env8" not in first.content
        assert "env8" in second.content and "env9" in second.content
        await dc.click_button(first.id, approve_all_id(first), w.alice)
        await dc.wait_for(lambda: "8. ✅ Approved by alice" in dc.message(first.id).content, what="first part decided")
        assert tool.runs == [] and button_ids(dc.message(second.id), enabled_only=True) == button_ids(second)
        [reject_all] = [i for i in button_ids(second) if i.startswith("rb:r:") and i.endswith(":*")]
        await dc.click_button(second.id, reject_all, w.alice)
        await dc.wait_for(lambda: bot_messages(dc, thread_id)[-1].content == "Eight deployed.", what="resumed")
        # Both messages end showing every decision, with no button left to press.
        await dc.wait_for(lambda: not button_ids(dc.message(first.id), enabled_only=True), what="first redrawn")
    assert tool.runs == [{"env": f"env{i}"} for i in range(8)]
    assert "10. ❌ Rejected by alice" in dc.message(second.id).content
    assert button_ids(dc.message(second.id), enabled_only=True) == []


async def test_cut_arguments_say_so_and_the_full_arguments_are_one_click_away(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    arguments = {"notes": "step; " * 600, "env": "prod", "target": "PRODUCTION"}
    openai_emulator.script(ToolCalls([Call("deploy", json.dumps(arguments))]))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry()):
        thread_id = await ask_in_thread(dc, w)
        approval = await wait_approval(dc, thread_id)
        [full] = [i for i in button_ids(approval) if i.startswith("rb:f:")]
        clicked = await dc.click_button(approval.id, full, w.bob)  # seeing is not deciding: anyone may look
        [attached] = await dc.wait_for(
            lambda: [r for r in dc.interaction_responses(clicked) if r.kind == "followup" and r.message_id],
            what="the arguments file",
        )
    assert '"target": "PRODUCTION"' in approval.content and shared_wording.arguments_cut() in approval.content
    assert approval.content.index('"notes"') < approval.content.index('"env"') < approval.content.index('"target"')
    responses = dc.interaction_responses(clicked)
    assert responses[0].callback_type == 5 and all(r.ephemeral for r in responses)  # deferred at once, only bob sees
    message = dc.message(attached.message_id or 0)
    [file] = message.attachments
    [call] = json.loads(dc.attachment_bytes(file))
    assert call["tool"] == "deploy" and call["arguments"] == arguments
    assert list(call["arguments"]) == ["notes", "env", "target"]  # the model's order
    assert tool.runs == [] and dc.message(approval.id).edit_count == 0


async def test_a_dm_click_by_someone_outside_the_allowed_guilds_is_refused(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    alice, mallory = dc.add_user("alice"), dc.add_user("mallory")
    allowed = dc.add_guild("Allowed", members=[alice])
    dc.add_guild("Elsewhere", members=[mallory])
    openai_emulator.script(DEPLOY, DEPLOY, Text("Deployed for alice."))
    # DMs were open when mallory asked; then the bot restarts with the default rule (members only).
    async with running_bot(
        dc, db, openai_emulator, registry=tool.registry(), discord_guild_ids=(str(allowed),), direct_messages="open"
    ):
        await dc.send_dm(mallory, "deploy please")
        stale = await wait_approval(dc, dc.dm_channel_id(mallory))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry(), discord_guild_ids=(str(allowed),)):
        refused = await dc.click_button(stale.id, button_ids(stale)[0], mallory)
        await dc.wait_for(lambda: ephemeral_texts(dc, refused), what="refusal")
        # A member of the allowed guild decides in their DM as anywhere else.
        await dc.send_dm(alice, "deploy please")
        approval = await wait_approval(dc, dc.dm_channel_id(alice))
        await dc.click_button(approval.id, button_ids(approval)[0], alice)
        await dc.wait_for(
            lambda: bot_messages(dc, dc.dm_channel_id(alice))[-1].content == "Deployed for alice.", what="resumed"
        )
    assert ephemeral_texts(dc, refused) == [shared_wording.direct_messages_members_only()]
    assert dc.message(stale.id).edit_count == 0 and button_ids(dc.message(stale.id), enabled_only=True)
    assert tool.runs == [{"env": "prod"}]


async def test_expiry_closes_every_message_of_a_request_shown_in_parts(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    openai_emulator.script(ToolCalls([Call("deploy", json.dumps({"env": f"env{i}"})) for i in range(12)]))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry(), approval_expiry_s=0.5) as (adapter, engine):
        thread_id = await ask_in_thread(dc, w)
        parts = await dc.wait_for(
            lambda: approval_messages(dc, thread_id) if len(approval_messages(dc, thread_id)) == 2 else None,
            what="two approval messages",
        )
        await asyncio.sleep(0.6)
        assert await expire_approvals(engine.approvals, {"discord": adapter.notifier}) == 1
        await dc.wait_for(lambda: all("⌛" in dc.message(m.id).content for m in parts), what="both marked expired")
    assert all(button_ids(dc.message(m.id), enabled_only=True) == [] for m in parts)
    assert "env11" in dc.message(parts[1].id).content  # each message keeps showing its own calls
    assert tool.runs == []
