"""Slack Stop end to end (real Bolt, the Slack emulator): the asker stops a streaming answer from the button on the
answer itself, in this process or another; a native stream, which takes no button, posts no Stop message."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from adapters.slack.controls import STOP_SHORTCUT
from tests.e2e.slack_harness import ALICE, BOB, SlackBot, bot_replies, eventually, mention, start_bot
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000STOP1"
STORY = "word " * 3000  # a minute of streaming: only a stop ends it early


@pytest.fixture
async def bot(db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator) -> AsyncIterator[SlackBot]:  # type: ignore[no-untyped-def]
    started = await start_bot(db, slack_emulator, openai_emulator.base_url)
    yield started
    await started.stop()


def stop_of(message: Any) -> dict[str, Any] | None:
    return next((e for b in message.blocks or [] if b.get("type") == "actions" for e in b.get("elements") or []
                 if e.get("action_id") == "relaybot_stop"), None)


def with_stop(slack: SlackEmulator, thread_ts: str) -> list[Any]:
    return [m for m in bot_replies(slack, CHANNEL, thread_ts) if stop_of(m)]


async def ask_story(slack: SlackEmulator, bot: SlackBot, openai: OpenAIEmulator) -> tuple[str, StopShown]:
    openai.script(Text(STORY, chunk_chars=5, delay_s=0.02))
    event = mention(slack, CHANNEL, "tell me a long story", user=ALICE)
    await slack.deliver_event(bot.url, event)
    assert await eventually(lambda: bool(with_stop(slack, event["ts"])))
    [message] = with_stop(slack, event["ts"])
    button = stop_of(message)
    assert button is not None
    return event["ts"], StopShown(ts=message.ts, value=str(button["value"]))


@dataclass(frozen=True)
class StopShown:
    """The message a Stop button was seen on, and its value (the message changes; a click names what was seen)."""

    ts: str
    value: str


def stop_click(slack: SlackEmulator, stop: StopShown, user: str) -> dict[str, Any]:
    return slack.block_actions(CHANNEL, stop.ts, user=user, action_id="relaybot_stop", value=stop.value)


def answer_of(slack: SlackEmulator, thread_ts: str) -> Any:
    return [m for m in bot_replies(slack, CHANNEL, thread_ts) if "word" in m.text][0]


async def test_the_asker_stops_the_answer_others_are_told_they_cannot(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    thread, stop = await ask_story(slack, bot, openai_emulator)
    assert stop.ts == answer_of(slack, thread).ts, "the button is on the answer being written"

    assert (await slack.deliver_interaction(bot.url, stop_click(slack, stop, BOB))).status == 200
    assert await eventually(lambda: any(e.user == BOB and "can stop this answer" in e.text for e in slack.ephemerals))

    assert (await slack.deliver_interaction(bot.url, stop_click(slack, stop, ALICE))).status == 200
    assert await eventually(lambda: answer_of(slack, thread).text.endswith("⏹ Stopped by u0000alice."))
    shown = answer_of(slack, thread).text
    assert "word" in shown and "▌" not in shown and len(shown) < len(STORY) // 2
    # The final edit took the button away; a click on it now is told the answer has finished.
    assert await eventually(lambda: not with_stop(slack, thread))
    assert len(bot_replies(slack, CHANNEL, thread)) == 1
    await slack.deliver_interaction(bot.url, stop_click(slack, stop, ALICE))
    assert await eventually(lambda: any(e.user == ALICE and "already finished" in e.text for e in slack.ephemerals))


async def test_a_click_received_by_another_process_stops_the_run(
    db, bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator  # type: ignore[no-untyped-def]
) -> None:
    slack = slack_emulator
    other = await start_bot(db, slack, openai_emulator.base_url)
    try:
        thread, stop = await ask_story(slack, bot, openai_emulator)
        # The click lands on the other process: it writes the stop request, the running one hears it.
        assert (await slack.deliver_interaction(other.url, stop_click(slack, stop, ALICE))).status == 200
        assert await eventually(lambda: answer_of(slack, thread).text.endswith("⏹ Stopped by u0000alice."))
        assert await eventually(lambda: not with_stop(slack, thread))
    finally:
        await other.stop()


async def test_a_native_stream_has_no_stop_message_and_is_one_post_while_it_runs(
    db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator  # type: ignore[no-untyped-def]
) -> None:
    # A stream takes no blocks, so it carries no Stop button, and no message of its own stands in for one: Stop is
    # the "Stop this answer" shortcut (tests/e2e/test_slack_stop_shortcut_e2e.py).
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, slack_native_streaming="auto", feedback_buttons=True)
    try:
        openai_emulator.script(Text(STORY, chunk_chars=5, delay_s=0.02))
        event = mention(slack, CHANNEL, "tell me a long story", user=ALICE)
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: any(m.stream is not None and len(m.text) > 500
                                            for m in bot_replies(slack, CHANNEL, event["ts"])))
        [answer] = bot_replies(slack, CHANNEL, event["ts"])
        assert answer.stream is not None and not answer.stream.stopped and not with_stop(slack, event["ts"])
        assert not [c for c in slack.calls if c.method == "chat.postMessage"], "one post: the stream itself"
        await slack.deliver_interaction(bot.url, slack.message_shortcut(CHANNEL, answer.ts, user=ALICE,
                                                                        callback_id=STOP_SHORTCUT))
        assert await eventually(lambda: answer_of(slack, event["ts"]).text.endswith("⏹ Stopped by u0000alice."))
        assert [m.ts for m in bot_replies(slack, CHANNEL, event["ts"])] == [answer.ts]
        assert not [c for c in slack.calls if c.method in ("chat.postMessage", "chat.delete")]
    finally:
        await bot.stop()


async def test_a_quick_native_answer_posts_no_stop_message_and_carries_its_feedback(
    db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator  # type: ignore[no-untyped-def]
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, slack_native_streaming="auto", feedback_buttons=True)
    try:
        openai_emulator.script(Text("Short and sweet.", chunk_chars=4, delay_s=0.01))
        event = mention(slack, CHANNEL, "quick one", user=ALICE)
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: bot.adapter.inflight_answers == 0 and bool(bot_replies(slack, CHANNEL, event["ts"])))
        [answer] = bot_replies(slack, CHANNEL, event["ts"])
        assert answer.stream is not None and answer.text == "Short and sweet."
        # chat.stopStream's blocks: 👍/👎 under the streamed text.
        assert [b["type"] for b in answer.blocks or []] == ["context_actions"]
        assert not [c for c in slack.calls if c.method == "chat.postMessage"], "no Stop message for a quick answer"
    finally:
        await bot.stop()


async def test_a_native_answer_streams_whole_while_slack_refuses_every_post(
    db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator  # type: ignore[no-untyped-def]
) -> None:
    # The stream is the answer's only message: a workspace whose chat.postMessage fails (5xx) throughout costs it
    # nothing, and nothing is tried beside it.
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, slack_native_streaming="auto")
    try:
        answer = "word " * 300
        openai_emulator.script(Text(answer, chunk_chars=5, delay_s=0.01))
        slack.fail_next("chat.postMessage", error="service_unavailable", http_status=503, times=200)
        event = mention(slack, CHANNEL, "a medium story", user=ALICE)
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: any(m.text.strip() == answer.strip() for m in bot_replies(slack, CHANNEL, event["ts"])))
        assert await eventually(lambda: bot.adapter.inflight_answers == 0)
        [streamed] = bot_replies(slack, CHANNEL, event["ts"])
        assert streamed.stream is not None and streamed.stream.stopped
        assert not [c for c in slack.calls if c.method == "chat.postMessage"]
    finally:
        slack.clear_faults()
        await bot.stop()
