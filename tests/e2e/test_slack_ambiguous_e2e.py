"""Ambiguous failures while an answer streams (Slack did the work, the reply was lost): no slack_sdk retry re-sends
the call, a post is looked up by its metadata before it is sent again, and a native stream's lost append is not
appended twice: every answer shows once, whole."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.e2e.slack_harness import SlackBot, bot_replies, eventually, mention, start_bot
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(60)

ANSWER = "Check the database first, then the cache, then the load balancer's health checks."


async def shown_once(slack: SlackEmulator, channel: str, thread: str, bot: SlackBot) -> None:
    assert await eventually(lambda: any(m.text == ANSWER for m in bot_replies(slack, channel, thread)))
    assert await eventually(lambda: bot.adapter.inflight_answers == 0)
    assert [m.text for m in bot_replies(slack, channel, thread)] == [ANSWER], "one message, the whole answer"


@pytest.fixture
async def classic(db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator) -> AsyncIterator[SlackBot]:  # type: ignore[no-untyped-def]
    started = await start_bot(db, slack_emulator, openai_emulator.base_url)
    yield started
    await started.stop()


async def test_a_first_post_whose_reply_was_lost_is_found_by_its_metadata_not_posted_twice(
    classic: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    openai_emulator.script(Text(ANSWER, chunk_chars=10, delay_s=0.05))
    slack.lose_reply_next("chat.postMessage")
    event = mention(slack, "C0000AMBI1", "where do I start?")
    await slack.deliver_event(classic.url, event)
    await shown_once(slack, "C0000AMBI1", event["ts"], classic)


async def test_an_edit_whose_reply_was_lost_is_simply_sent_again(
    classic: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    openai_emulator.script(Text(ANSWER, chunk_chars=6, delay_s=0.1))
    slack.lose_reply_next("chat.update", times=2)
    event = mention(slack, "C0000AMBI2", "where do I start?")
    await slack.deliver_event(classic.url, event)
    await shown_once(slack, "C0000AMBI2", event["ts"], classic)


async def test_a_native_append_whose_reply_was_lost_shows_its_text_once(
    db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator  # type: ignore[no-untyped-def]
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, slack_native_streaming="auto")
    try:
        openai_emulator.script(Text(ANSWER, chunk_chars=8, delay_s=0.08))
        slack.lose_reply_next("chat.appendStream")
        event = mention(slack, "C0000AMBI3", "where do I start?")
        await slack.deliver_event(bot.url, event)
        await shown_once(slack, "C0000AMBI3", event["ts"], bot)
    finally:
        await bot.stop()
