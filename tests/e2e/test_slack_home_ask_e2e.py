"""Slack's `/ask` and App Home end to end with real Bolt: the question answered in its channel thread, a clear
reply where the bot is not a member, and the Home tab with the approvals this user may decide, clickable there."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters import wording
from core.tools import ToolRegistry
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.emulators.slack import SlackEmulator, app_home_opened_event
from tests.e2e.slack_harness import ALICE, BOB, CAROL, SlackBot, bot_replies, deploy_registry, eventually, mention, start_bot

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000ASK01"


@pytest.fixture
def deploys() -> list[str]:
    return []


@pytest.fixture
def registry(deploys: list[str]) -> ToolRegistry:
    return deploy_registry(deploys)


@pytest.fixture
async def bot(db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, registry) -> AsyncIterator[SlackBot]:  # type: ignore[no-untyped-def]
    started = await start_bot(db, slack_emulator, openai_emulator.base_url, registry=registry, approvers=CAROL)
    yield started
    await started.stop()


async def test_ask_posts_the_question_in_the_channel_and_answers_in_its_thread(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    openai_emulator.script(Text("The deploy window is Tuesday.", delay_s=0.05))
    delivery = await slack.deliver_command(bot.url, slack.slash_command("/ask", "when is the deploy window?",
                                                                        user=ALICE, channel=CHANNEL))
    assert delivery.status == 200 and delivery.body == "", "acked at once, with nothing to show"
    assert await eventually(lambda: any(m.text == "The deploy window is Tuesday." for m in slack.messages(CHANNEL)))
    [question] = [m for m in slack.messages(CHANNEL) if m.thread_ts is None]
    assert question.is_bot and f"<@{ALICE}>" in question.text and "when is the deploy window?" in question.text
    [answer] = [m for m in slack.messages(CHANNEL) if m.thread_ts == question.ts]
    assert answer.text == "The deploy window is Tuesday."
    assert "when is the deploy window?" in json.dumps(openai_emulator.chat_requests[-1]["messages"])


async def test_ask_where_the_bot_is_not_a_member_says_so_to_the_asker(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    slack.remove_bot_from("C0000NOTIN")
    delivery = await slack.deliver_command(bot.url, slack.slash_command("/ask", "hello?", user=ALICE, channel="C0000NOTIN"))
    assert delivery.status == 200
    assert await eventually(lambda: bool(slack.ephemerals))
    [note] = slack.ephemerals
    assert note.user == ALICE and "not a member" in note.text
    assert slack.messages("C0000NOTIN") == [] and not openai_emulator.chat_requests


async def test_ask_without_a_question_explains_the_command(bot: SlackBot, slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    await slack.deliver_command(bot.url, slack.slash_command("/ask", "  ", user=ALICE, channel=CHANNEL))
    assert await eventually(lambda: bool(slack.ephemerals))
    assert "/ask" in slack.ephemerals[0].text and slack.messages(CHANNEL) == []


async def test_app_home_explains_the_bot_and_lists_the_approvals_this_user_may_decide(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, deploys: list[str]
) -> None:
    slack = slack_emulator
    for user in (ALICE, BOB, CAROL):
        slack.add_user(user)
    await slack.deliver_event(bot.url, app_home_opened_event(user=ALICE, channel="D0000ALICE"))
    assert await eventually(lambda: any(v.user_id == ALICE for v in slack.views))
    empty = json.dumps(slack.views[-1].view)
    assert "/ask" in empty and wording.home_no_approvals() in empty

    openai_emulator.script(ToolCalls([Call("deploy", '{"env": "prod"}', id="call_prod")], text="Deploying."),
                           Text("Deployed to prod."))
    event = mention(slack, CHANNEL, "deploy prod", user=ALICE)
    await slack.deliver_event(bot.url, event)
    assert await eventually(lambda: any(is_approval(m) for m in bot_replies(slack, CHANNEL, event["ts"])))
    [approval] = [m for m in bot_replies(slack, CHANNEL, event["ts"]) if is_approval(m)]

    # Bob may not decide it: his Home has nothing. Carol (an approver) and Alice (who asked) see it.
    for user in (BOB, CAROL, ALICE):
        await slack.deliver_event(bot.url, app_home_opened_event(user=user, channel="D0000" + user[-5:]))
    assert await eventually(lambda: {v.user_id for v in slack.views} >= {ALICE, BOB, CAROL} and len(slack.views) >= 4)
    latest = {v.user_id: v.view for v in slack.views}
    assert wording.home_no_approvals() in json.dumps(latest[BOB])
    carol_buttons = [el for b in latest[CAROL]["blocks"] if b["type"] == "actions" for el in b["elements"]]
    assert [el["action_id"] for el in carol_buttons] == ["relaybot_home_approve", "relaybot_home_reject"]

    # Carol approves from her Home tab: the call runs, the approval message in the thread shows it, the
    # answer goes on in the thread, and her Home no longer lists it.
    click = slack.home_block_actions(CAROL, action_id="relaybot_home_approve", value=carol_buttons[0]["value"])
    assert (await slack.deliver_interaction(bot.url, click)).status == 200
    assert await eventually(lambda: any(m.text == "Deployed to prod." for m in bot_replies(slack, CHANNEL, event["ts"])))
    assert deploys == ["prod"]
    assert f"<@{CAROL}>" in json.dumps(slack.message(CHANNEL, approval.ts).blocks)
    assert await eventually(lambda: wording.home_no_approvals() in json.dumps(
        [v.view for v in slack.views if v.user_id == CAROL][-1]))


async def test_ask_in_socket_mode_is_acked_and_answered(
    db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator  # type: ignore[no-untyped-def]
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, socket_mode=True)
    try:
        assert await slack.wait_socket_connected()
        openai_emulator.script(Text("Over the socket.", delay_s=0.05))
        ack = await slack.push_socket_event(slack.slash_command("/ask", "does this work?", user=ALICE, channel=CHANNEL),
                                            type="slash_commands")
        assert ack is not None, "acked (Slack waits 3 s at most)"
        assert await eventually(lambda: any(m.text == "Over the socket." for m in slack.messages(CHANNEL)))
    finally:
        await bot.stop()


def is_approval(message: Any) -> bool:
    """An approval's blocks, not an answer's own (its text as a markdown block beside Stop or 👍/👎)."""
    return bool(message.blocks) and not any(b.get("type") in ("markdown", "context_actions") for b in message.blocks)
