"""Slack Stop end to end (real Bolt, the Slack emulator): the asker stops a streaming answer, in this process or another."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

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


def stop_messages(slack: SlackEmulator, thread_ts: str) -> list[Any]:
    return [m for m in slack.thread(CHANNEL, thread_ts) if m.blocks and m.blocks[0].get("type") == "actions"]


async def ask_story(slack: SlackEmulator, bot: SlackBot, openai: OpenAIEmulator) -> tuple[str, Any]:
    openai.script(Text(STORY, chunk_chars=5, delay_s=0.02))
    event = mention(slack, CHANNEL, "tell me a long story", user=ALICE)
    await slack.deliver_event(bot.url, event)
    assert await eventually(lambda: bool(stop_messages(slack, event["ts"])))
    [stop] = stop_messages(slack, event["ts"])
    return event["ts"], stop


def stop_click(slack: SlackEmulator, stop: Any, user: str) -> dict[str, Any]:
    button = stop.blocks[0]["elements"][0]
    assert button["action_id"] == "relaybot_stop"
    return slack.block_actions(CHANNEL, stop.ts, user=user, action_id="relaybot_stop", value=button["value"])


def answer_of(slack: SlackEmulator, thread_ts: str) -> Any:
    return [m for m in bot_replies(slack, CHANNEL, thread_ts) if not m.blocks][0]


async def test_the_asker_stops_the_answer_others_are_told_they_cannot(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    thread, stop = await ask_story(slack, bot, openai_emulator)

    assert (await slack.deliver_interaction(bot.url, stop_click(slack, stop, BOB))).status == 200
    assert await eventually(lambda: any(e.user == BOB and "can stop this answer" in e.text for e in slack.ephemerals))

    assert (await slack.deliver_interaction(bot.url, stop_click(slack, stop, ALICE))).status == 200
    assert await eventually(lambda: answer_of(slack, thread).text.endswith("⏹ Stopped by u0000alice."))
    shown = answer_of(slack, thread).text
    assert "word" in shown and "▌" not in shown and len(shown) < len(STORY) // 2
    # The Stop message is gone; a click on it now is told the answer has finished.
    assert await eventually(lambda: not stop_messages(slack, thread))
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
        assert await eventually(lambda: not stop_messages(slack, thread))
    finally:
        await other.stop()


async def test_a_stop_button_slack_will_not_take_leaves_the_answer_whole_and_a_warning(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    # The Stop message's post failing for good (5xx past its retries) used to end its task with an exception
    # nobody retrieved; the answer itself is edited, not posted, so it must not notice.
    slack = slack_emulator
    answer = "word " * 300
    openai_emulator.script(Text(answer, chunk_chars=5, delay_s=0.01))
    event = mention(slack, CHANNEL, "a medium story", user=ALICE)
    await slack.deliver_event(bot.url, event)
    assert await eventually(lambda: bool(bot_replies(slack, CHANNEL, event["ts"])))
    slack.fail_next("chat.postMessage", error="service_unavailable", http_status=503, times=200)
    try:
        assert await eventually(lambda: any(m.text.strip() == answer.strip() for m in bot_replies(slack, CHANNEL, event["ts"])))
        assert await eventually(lambda: any("could not show the Stop button" in r.getMessage() for r in caplog.records))
    finally:
        slack.clear_faults()
    assert not stop_messages(slack, event["ts"])
    assert not [r for r in caplog.records if r.name == "adapters.slack.controls" and r.levelname == "ERROR"]
