"""The Slack adapter end to end: real AsyncApp, signed HTTP and Socket Mode, emulators, Postgres."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from core.store.live_messages import LiveMessage, LiveMessages
from tests.emulators.openai_server import Fault, OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator
from tests.e2e.slack_harness import (
    ALICE,
    SlackBot,
    bot_replies,
    channel_message,
    dm,
    eventually,
    mention,
    model_request_text,
    start_bot,
)

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000GENRL"
DM_CHANNEL = "D0000ALICE"


@pytest.fixture
async def bot(db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator) -> AsyncIterator[SlackBot]:
    started = await start_bot(db, slack_emulator, openai_emulator.base_url)
    yield started
    await started.stop()


def answered(slack: SlackEmulator, channel: str, thread_ts: str, text: str) -> bool:
    return any(m.text == text for m in bot_replies(slack, channel, thread_ts))


async def test_mention_streams_placeholder_edits_and_final_answer(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    answer = "The deploy window is Tuesday at 10:00, after the standup."
    openai_emulator.script(Text(answer, chunk_chars=6, delay_s=0.01))
    event = mention(slack, CHANNEL, "when is the deploy window?")
    delivery = await slack.deliver_event(bot.url, event)
    assert delivery.status == 200
    assert await eventually(lambda: answered(slack, CHANNEL, event["ts"], answer))
    [reply] = bot_replies(slack, CHANNEL, event["ts"])
    assert reply.thread_ts == event["ts"]
    assert reply.edits, "the answer is streamed by editing the placeholder"
    posted = slack.calls[[c.method for c in slack.calls].index("chat.postMessage")]
    assert "thinking" in str(posted.params.get("text"))
    assert "when is the deploy window?" in model_request_text(openai_emulator.chat_requests[-1])
    assert await eventually(lambda: bot.adapter.inflight_answers == 0)
    assert await LiveMessages(bot.engine.db).take_all("slack") == []


async def test_bad_signature_and_stale_timestamp_get_401(bot: SlackBot, slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    event = mention(slack, CHANNEL, "hi")
    assert (await slack.deliver_event(bot.url, event, sign=False)).status == 401
    assert (await slack.deliver_event(bot.url, event, timestamp=int(time.time()) - 600)).status == 401
    await asyncio.sleep(0.2)
    assert bot_replies(slack, CHANNEL, event["ts"]) == []
