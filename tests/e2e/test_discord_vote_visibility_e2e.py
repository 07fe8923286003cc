"""Discord approval clicks count only from someone who may view the approval's channel: an interaction naming an
approval in a channel hidden from the voter (a global approver) decides nothing and shows no arguments."""

from __future__ import annotations

import json

import pytest

from core import wording as engine_wording
from core.store.db import Database
from tests.adapters.discord.harness import DeployTool, approval_message, bot_messages, button_ids, make_world, running_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls

pytestmark = pytest.mark.timeout(60)


async def test_a_click_from_someone_who_cannot_view_the_approvals_channel_neither_votes_nor_shows_its_arguments(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    ops = dc.add_channel(w.guild_id, "ops-private")
    openai_emulator.script(
        # Arguments long enough to be cut, so the message has a "Full arguments" button too.
        ToolCalls([Call("deploy", json.dumps({"env": "ops-secret", "notes": "step; " * 600}))]), Text("Deployed."),
    )
    # Bob approves anywhere (a global approver), but the approval is in a channel he may not view.
    async with running_bot(dc, db, openai_emulator, registry=tool.registry(), approvers=str(w.bob)):
        asked = await dc.send_user_message(ops, w.alice, "deploy ops", mentions_bot=True)
        ops_thread = await dc.wait_for(lambda: dc.thread_of(asked), what="ops thread")
        secret = await dc.wait_for(lambda: approval_message(dc, ops_thread.id), what="ops approval")
        [ops_approve] = [i for i in button_ids(secret) if i.startswith("rb:a:")]
        [ops_full] = [i for i in button_ids(secret) if i.startswith("rb:f:")]

        # Bob may not view the ops channel; a hand-made interaction naming its approval message is sent anyway.
        dc.world.hidden_channels[ops] = {w.bob}
        vote = await dc.click_custom_id(ops_thread.id, ops_approve, w.bob, message_id=secret.id)
        look = await dc.click_custom_id(ops_thread.id, ops_full, w.bob, message_id=secret.id)
        for forged in (vote, look):
            await dc.wait_for(lambda: any(
                engine_wording.approval_not_found() in (r.content or "") and r.ephemeral
                for r in dc.interaction_responses(forged)  # noqa: B023
            ), what="the refusal")

        assert tool.runs == []
        assert not any(r.message_id and dc.message(r.message_id).attachments for r in dc.interaction_responses(look))
        assert dc.message(secret.id).edit_count == 0
        assert not any("Deployed." in m.content for m in bot_messages(dc, ops_thread.id))

        # Once Bob may view the channel, the same button decides it.
        dc.world.hidden_channels[ops] = set()
        await dc.click_button(secret.id, ops_approve, w.bob)
        await dc.wait_for(lambda: any("Deployed." in m.content for m in bot_messages(dc, ops_thread.id)), what="resumed")
    assert [run["env"] for run in tool.runs] == ["ops-secret"]


async def test_a_click_from_another_guild_naming_an_approval_decides_nothing_there(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    # Bob approves anywhere and may view the approval's channel, but the interaction comes from another guild (an
    # admin there, a button id copied over): another team's approval is not found from it (issue 25).
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    other_guild = dc.add_guild("Other guild")
    other_channel = dc.add_channel(other_guild, "general")
    dc.add_member(other_guild, w.bob)
    openai_emulator.script(ToolCalls([Call("deploy", json.dumps({"env": "prod"}))]), Text("Deployed."))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry(), approvers=str(w.bob)):
        asked = await dc.send_user_message(w.channel_id, w.alice, "deploy prod", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        approval = await dc.wait_for(lambda: approval_message(dc, thread.id), what="approval")
        [approve] = [i for i in button_ids(approval) if i.startswith("rb:a:")]

        # A hand-made interaction from the other guild's channel naming the approval's message and button.
        forged = await dc.click_custom_id(other_channel, approve, w.bob, message_id=approval.id)
        await dc.wait_for(lambda: any(
            engine_wording.approval_not_found() in (r.content or "") and r.ephemeral for r in dc.interaction_responses(forged)
        ), what="the refusal")
        assert tool.runs == [] and dc.message(approval.id).edit_count == 0

        # From the approval's own guild, the same button decides it.
        await dc.click_button(approval.id, approve, w.bob)
        await dc.wait_for(lambda: any("Deployed." in m.content for m in bot_messages(dc, thread.id)), what="resumed")
    assert [run["env"] for run in tool.runs] == ["prod"]
