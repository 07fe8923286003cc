"""Slack's message shortcuts end to end (real Bolt, the Slack emulator, real Postgres): "Ask relaybot about this" answers
the message in its thread with the thread as context, "Ask relaybot privately" only to the asker, "Summarise this
thread" from the thread as read_conversation reads it; where the bot cannot read the thread it answers privately and
says so."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters import wording
from adapters.slack.render import sentence
from adapters.slack.shortcuts import ASK_PRIVATELY_SHORTCUT, ASK_SHORTCUT, SUMMARISE_SHORTCUT
from core.store.db import Database
from tests.e2e.slack_harness import ALICE, BOB, CAROL, SlackBot, bot_replies, eventually, start_bot
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000SHORT"
ROOT = "how do we roll back a bad deploy?"
REPLY = "I think there is a runbook for it somewhere"


@pytest.fixture
async def bot(db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator) -> AsyncIterator[SlackBot]:
    started = await start_bot(db, slack_emulator, openai_emulator.base_url)
    yield started
    await started.stop()


def a_thread(slack: SlackEmulator) -> tuple[str, str]:
    """Alice's question and Bob's reply in its thread: (root ts, reply ts)."""
    root = slack.add_user_message(CHANNEL, ROOT, ALICE)
    return root, slack.add_user_message(CHANNEL, REPLY, BOB, root)


async def use(slack: SlackEmulator, bot: SlackBot, ts: str, callback_id: str, *, user: str = CAROL) -> str:
    """`user` chooses the shortcut on message `ts`; returns its response_url."""
    payload = slack.message_shortcut(CHANNEL, ts, user=user, callback_id=callback_id)
    assert (await slack.deliver_interaction(bot.url, payload)).status == 200
    return str(payload["response_url"])


def prompt(openai: OpenAIEmulator) -> str:
    return json.dumps(openai.chat_requests[-1]["messages"], ensure_ascii=False)


def shown_text(ephemeral: Any) -> str:
    parts = []
    for block in ephemeral.blocks or []:
        text = block.get("text")
        parts.append(text.get("text", "") if isinstance(text, dict) else str(text or ""))
    return "\n".join(parts) or ephemeral.text


async def test_ask_about_this_answers_the_message_in_its_thread_with_the_thread_as_context(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    root, reply = a_thread(slack)
    openai_emulator.script(Text("Use the rollback runbook: revert, then redeploy."))
    await use(slack, bot, reply, ASK_SHORTCUT)
    assert await eventually(lambda: any(m.text.endswith("redeploy.") for m in bot_replies(slack, CHANNEL, root)))
    [answer] = bot_replies(slack, CHANNEL, root)
    assert answer.thread_ts == root and answer.text == "Use the rollback runbook: revert, then redeploy."
    sent = prompt(openai_emulator)
    assert REPLY in sent and ROOT in sent, "the message and its thread reached the model"
    assert slack.ephemerals_for(CAROL) == []
    assert slack.message(CHANNEL, reply).text == REPLY and slack.message(CHANNEL, root).text == ROOT


async def test_ask_privately_answers_only_the_person_who_chose_it(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    root, reply = a_thread(slack)
    openai_emulator.script(Text("Revert the release, then redeploy."))
    url = await use(slack, bot, reply, ASK_PRIVATELY_SHORTCUT)
    assert await eventually(lambda: len(slack.ephemerals_for(CAROL)) == 2)
    placeholder, answer = slack.ephemerals_for(CAROL)
    assert placeholder.text == sentence(wording.private_thinking())
    assert shown_text(answer) == "Revert the release, then redeploy." and answer.thread_ts == root
    assert REPLY in prompt(openai_emulator) and ROOT in prompt(openai_emulator)
    # Nothing anyone else sees: no post in the thread, the messages untouched (a shortcut's "original" is the
    # message it was used on: never replaced), nothing for Alice or Bob.
    assert bot_replies(slack, CHANNEL, root) == []
    assert slack.message(CHANNEL, reply).text == REPLY and not slack.message(CHANNEL, reply).edits
    assert not any(p.get("replace_original") for p in slack.response_url_posts)
    assert slack.ephemerals_for(ALICE) == slack.ephemerals_for(BOB) == []
    assert slack.response_url_uses(url) == 2


async def test_summarise_this_thread_reads_it_and_answers_in_it(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    root, reply = a_thread(slack)
    openai_emulator.script(Text("Alice asked how to roll back; Bob pointed at a runbook. Open: where it is."))
    await use(slack, bot, root, SUMMARISE_SHORTCUT)
    assert await eventually(lambda: any(m.text.endswith("where it is.") for m in bot_replies(slack, CHANNEL, root)))
    [summary] = bot_replies(slack, CHANNEL, root)
    assert summary.text.startswith("Alice asked how to roll back")
    sent = prompt(openai_emulator)
    assert json.dumps(wording.summarise_request())[1:-1] in sent and ROOT in sent and REPLY in sent
    assert any(c.method == "conversations.replies" and c.params.get("ts") == root for c in slack.calls)


async def test_where_the_bot_cannot_read_the_thread_it_answers_privately_and_says_so(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    root, reply = a_thread(slack)
    slack.remove_bot_from(CHANNEL)
    openai_emulator.script(Text("A rollback reverts the release."))
    await use(slack, bot, reply, ASK_SHORTCUT)
    assert await eventually(lambda: len(slack.ephemerals_for(CAROL)) == 2)
    answer = slack.ephemerals_for(CAROL)[1]
    assert shown_text(answer).startswith(wording.thread_unreadable_answered_privately())
    assert "A rollback reverts the release." in shown_text(answer)
    sent = prompt(openai_emulator)
    assert REPLY in sent and ROOT not in sent, "from the message alone"
    assert slack.messages(CHANNEL) and all(not m.is_bot for m in slack.messages(CHANNEL))

    asked = len(openai_emulator.chat_requests)
    await use(slack, bot, root, SUMMARISE_SHORTCUT, user=ALICE)
    assert await eventually(lambda: bool(slack.ephemerals_for(ALICE)))
    assert [e.text for e in slack.ephemerals_for(ALICE)] == [sentence(wording.thread_unreadable_to_summarise())]
    assert len(openai_emulator.chat_requests) == asked, "nothing to summarise: no model call"
    assert all(not m.is_bot for m in slack.messages(CHANNEL))
