"""A chat.startStream whose outcome the bot never sees (reply lost, 500 after the work, a reply slower than the
streamer's call timeout): the stream Slack made is found and becomes the answer's one message (real Bolt, the Slack
and OpenAI emulators)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.slack.metadata import ANSWER_PART_EVENT
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator
from tests.emulators.slack.limits import CallFault
from tests.e2e.slack_harness import SlackBot, bot_replies, eventually, mention, start_bot

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000UNSEE"
ANSWER = "The **deploy window** is Tuesday at 10:00, after the standup; the release notes go out the day before. " * 3


@pytest.fixture
async def bot(db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator) -> AsyncIterator[SlackBot]:  # type: ignore[no-untyped-def]
    started = await start_bot(db, slack_emulator, openai_emulator.base_url, slack_native_streaming="auto")
    yield started
    await started.stop()


def first_start_fails(kind: str, *, delay_s: float = 0.0) -> Any:
    """A fault plan: the first chat.startStream meets `kind`, every other call goes through."""
    fired: list[str] = []

    def plan(method: str, params: dict[str, Any]) -> CallFault | None:
        if method != "chat.startStream" or fired:
            return None
        fired.append(method)
        return CallFault(kind=kind, delay_s=delay_s)  # type: ignore[arg-type]

    return plan


async def the_one_reply(slack: SlackEmulator, bot: SlackBot, thread_ts: str) -> Any:
    """The thread ends with exactly one bot message showing the whole answer; it is returned."""
    assert await eventually(lambda: any(m.text == ANSWER for m in bot_replies(slack, CHANNEL, thread_ts)))
    assert await eventually(lambda: bot.adapter.inflight_answers == 0)
    replies = bot_replies(slack, CHANNEL, thread_ts)
    assert [m.text for m in replies] == [ANSWER], "one message, the whole answer, nothing beside it"
    return replies[0]


@pytest.mark.parametrize(
    ("kind", "delay_s"),
    [("lost", 0.0), ("error_after_work", 0.0), ("slow_reply", 3.0)],  # 3 s: past the call timeout (30 s × 0.05)
)
async def test_a_stream_started_unseen_becomes_the_answers_one_message(
    kind: str, delay_s: float, bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    slack.fault_plan = first_start_fails(kind, delay_s=delay_s)
    openai_emulator.script(Text(ANSWER, chunk_chars=12, delay_s=0.03))
    event = mention(slack, CHANNEL, "when is the deploy window?")
    await slack.deliver_event(bot.url, event)
    reply = await the_one_reply(slack, bot, event["ts"])
    assert reply.stream is not None, "the message is the stream Slack made on the unseen start"
    assert reply.stream.stopped, "and it is not left streaming"
    assert reply.metadata is not None and reply.metadata["event_type"] == ANSWER_PART_EVENT, (
        "it carries the part's metadata, as any message of an answer does, for later look-ups"
    )
    assert bot.adapter.native.counts.fell_back == 1


async def test_a_start_dropped_before_slack_read_it_posts_the_answer_once(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    slack.fault_plan = first_start_fails("dropped")
    openai_emulator.script(Text(ANSWER, chunk_chars=12, delay_s=0.03))
    event = mention(slack, CHANNEL, "when is the deploy window?")
    await slack.deliver_event(bot.url, event)
    reply = await the_one_reply(slack, bot, event["ts"])
    assert reply.stream is None, "nothing was started: the answer was posted and updated"
