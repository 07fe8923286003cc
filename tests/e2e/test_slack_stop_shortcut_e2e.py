"""Slack's "Stop this answer" message shortcut end to end (real Bolt, the Slack emulator, real Postgres): it stops a
native stream (which carries no Stop button) and a post+update answer, in this process or another, with the Stop
button's rule of who may; on a finished answer or a message that is no answer it says so, never nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters import wording
from adapters.slack.controls import STOP_SHORTCUT, STREAM_RUN_KEY
from core import wording as core_wording
from core.store.db import Database
from tests.e2e.slack_harness import ALICE, BOB, SlackBot, bot_replies, eventually, mention, start_bot
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000SHORT"
STORY = "word " * 3000  # a minute of streaming: only a stop ends it early
STOPPED_BY_ALICE = core_wording.stopped_by("u0000alice")


@pytest.fixture
async def native_bot(db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator) -> AsyncIterator[SlackBot]:
    started = await start_bot(db, slack_emulator, openai_emulator.base_url, slack_native_streaming="auto",
                              feedback_buttons=True)
    yield started
    await started.stop()


def answer_of(slack: SlackEmulator, thread_ts: str) -> Any | None:
    return next((m for m in bot_replies(slack, CHANNEL, thread_ts) if "word" in m.text), None)


async def ask_story(slack: SlackEmulator, bot: SlackBot, openai: OpenAIEmulator, *, native: bool) -> tuple[str, Any]:
    """A long answer being written; returns its thread and its message (a native stream, or a post carrying Stop)."""
    openai.script(Text(STORY, chunk_chars=5, delay_s=0.02))
    event = mention(slack, CHANNEL, "tell me a long story", user=ALICE)
    await slack.deliver_event(bot.url, event)

    def writing() -> bool:
        answer = answer_of(slack, event["ts"])
        return answer is not None and (answer.stream is not None if native else bool(answer.blocks))

    assert await eventually(writing)
    return event["ts"], answer_of(slack, event["ts"])


async def shortcut(slack: SlackEmulator, bot: SlackBot, ts: str, user: str) -> None:
    delivery = await slack.deliver_interaction(
        bot.url, slack.message_shortcut(CHANNEL, ts, user=user, callback_id=STOP_SHORTCUT)
    )
    assert delivery.status == 200  # acked (Bolt acks before the listener's work)


def told(slack: SlackEmulator, user: str, text: str) -> bool:
    return any(e.user == user and text in e.text for e in slack.ephemerals)


async def test_the_shortcut_stops_a_native_stream_which_ends_as_a_stopped_answer_in_one_message(
    native_bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    thread, answer = await ask_story(slack, native_bot, openai_emulator, native=True)
    assert not answer.blocks, "a stream takes no blocks: no Stop button on it"
    # Long enough under way (2 s of text) that a Stop message of its own would have been posted by now.
    assert await eventually(lambda: len(slack.message(CHANNEL, answer.ts).text) > 500)

    await shortcut(slack, native_bot, answer.ts, ALICE)
    assert await eventually(lambda: slack.message(CHANNEL, answer.ts).text.endswith(STOPPED_BY_ALICE))
    stopped = slack.message(CHANNEL, answer.ts)
    assert stopped.stream is not None and stopped.stream.stopped
    assert "word" in stopped.text and len(stopped.text) < len(STORY) // 2
    assert not [b for b in stopped.blocks or [] if b.get("type") == "context_actions"], "a stopped answer has no 👍/👎"
    assert await eventually(lambda: native_bot.adapter.inflight_answers == 0)
    # The answer was one message, and the bot posted nothing else: no Stop message, no note to the asker.
    assert [m.ts for m in bot_replies(slack, CHANNEL, thread)] == [answer.ts]
    assert not [c for c in slack.calls if c.method == "chat.postMessage"]
    assert not [e for e in slack.ephemerals if e.user == ALICE]


async def test_the_shortcut_stops_a_post_and_update_answer_by_the_stop_button_it_carries(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, feedback_buttons=True)
    try:
        thread, answer = await ask_story(slack, bot, openai_emulator, native=False)
        assert answer.stream is None
        await shortcut(slack, bot, answer.ts, ALICE)
        assert await eventually(lambda: slack.message(CHANNEL, answer.ts).text.endswith(STOPPED_BY_ALICE))
        assert await eventually(lambda: not slack.message(CHANNEL, answer.ts).blocks
                                or all(b.get("type") == "markdown" for b in slack.message(CHANNEL, answer.ts).blocks))
        assert [m.ts for m in bot_replies(slack, CHANNEL, thread)] == [answer.ts]
    finally:
        await bot.stop()


async def test_a_shortcut_received_by_another_process_stops_the_native_stream(
    db: Database, native_bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    other = await start_bot(db, slack, openai_emulator.base_url, slack_native_streaming="auto")
    try:
        thread, answer = await ask_story(slack, native_bot, openai_emulator, native=True)
        key = STREAM_RUN_KEY.format(channel=CHANNEL, ts=answer.ts)
        # The stream's run is written to the database beside its start (not awaited by the stream).
        for _ in range(250):
            if await _state(db, key):
                break
            await _pause()
        assert await _state(db, key)
        # The other process knows nothing of the stream in memory: it reads the run, writes the stop request,
        # and the process streaming the answer hears it.
        await shortcut(slack, other, answer.ts, ALICE)
        assert await eventually(lambda: slack.message(CHANNEL, answer.ts).text.endswith(STOPPED_BY_ALICE))
        assert [m.ts for m in bot_replies(slack, CHANNEL, thread)] == [answer.ts]
        assert not [e for e in slack.ephemerals if e.user == ALICE]
    finally:
        await other.stop()


async def test_a_person_the_policy_does_not_allow_is_told_who_may_and_the_answer_goes_on(
    native_bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    thread, answer = await ask_story(slack, native_bot, openai_emulator, native=True)
    await shortcut(slack, native_bot, answer.ts, BOB)
    assert await eventually(lambda: told(slack, BOB, "can stop this answer"))
    shown = slack.message(CHANNEL, answer.ts).text
    assert await eventually(lambda: len(slack.message(CHANNEL, answer.ts).text) > len(shown)), "still being written"
    assert not slack.message(CHANNEL, answer.ts).stream.stopped
    await shortcut(slack, native_bot, answer.ts, ALICE)
    assert await eventually(lambda: slack.message(CHANNEL, answer.ts).text.endswith(STOPPED_BY_ALICE))


async def test_the_shortcut_on_a_finished_answer_or_a_message_that_is_no_answer_is_told_so(
    db: Database, native_bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    plain = await start_bot(db, slack, openai_emulator.base_url, slack_native_streaming="auto", feedback_buttons=False)
    try:
        # Two finished native answers: one whose 👍/👎 name its run, one with no buttons (its run was recorded).
        openai_emulator.script(Text("Short and sweet.", chunk_chars=4, delay_s=0.01),
                               Text("Short and plain.", chunk_chars=4, delay_s=0.01))
        with_feedback = mention(slack, CHANNEL, "quick one", user=ALICE)
        await slack.deliver_event(native_bot.url, with_feedback)
        assert await eventually(lambda: native_bot.adapter.inflight_answers == 0
                                and bool(bot_replies(slack, CHANNEL, with_feedback["ts"])))
        without = mention(slack, CHANNEL, "another quick one", user=ALICE)
        await slack.deliver_event(plain.url, without)
        assert await eventually(lambda: plain.adapter.inflight_answers == 0
                                and bool(bot_replies(slack, CHANNEL, without["ts"])))
        [first] = bot_replies(slack, CHANNEL, with_feedback["ts"])
        [second] = bot_replies(slack, CHANNEL, without["ts"])
        assert first.stream is not None and second.stream is not None and not second.blocks

        await shortcut(slack, native_bot, first.ts, ALICE)
        assert await eventually(lambda: told(slack, ALICE, core_wording.stop_too_late()))
        # The other process, from the database: finished too.
        for _ in range(250):
            if await _state(db, STREAM_RUN_KEY.format(channel=CHANNEL, ts=second.ts)):
                break
            await _pause()
        await shortcut(slack, native_bot, second.ts, ALICE)
        assert await eventually(lambda: [e.text for e in slack.ephemerals].count(core_wording.stop_too_late()) == 2)

        # The question itself is not the bot's message.
        await shortcut(slack, native_bot, with_feedback["ts"], ALICE)
        assert await eventually(lambda: told(slack, ALICE, wording.stop_shortcut_not_mine()))
        # A message of the bot that is no answer (a notice): nothing to stop.
        notice = slack.add_bot_message(CHANNEL, "The bot is restarting.", bot_id=slack.bot_id)
        await shortcut(slack, native_bot, notice, ALICE)
        assert await eventually(lambda: told(slack, ALICE, wording.stop_shortcut_no_answer()))
        assert [e.text for e in slack.ephemerals if e.user == ALICE] == [
            core_wording.stop_too_late(), core_wording.stop_too_late(), wording.stop_shortcut_not_mine(),
            wording.stop_shortcut_no_answer(),
        ]
    finally:
        await plain.stop()


async def _state(db: Database, key: str) -> str | None:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT value FROM app_state WHERE key = %s", (key,))
        row = await cursor.fetchone()
    return str(row[0]) if row else None


async def _pause() -> None:
    await asyncio.sleep(0.02)
