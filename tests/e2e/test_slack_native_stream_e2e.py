"""Slack's native streams end to end (real Bolt, the Slack and OpenAI emulators): start/append/stop, tasks for
tools, and the switch to post+update on a 429, a refusal or an expired stream with the text complete and shown once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from core.tools import ToolSpec, builtin_registry
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.emulators.slack import SlackEmulator
from tests.e2e.slack_harness import ALICE, SlackBot, bot_replies, eventually, mention, start_bot

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000NATIV"
ANSWER = "The **deploy window** is Tuesday at 10:00, after the standup; ask @here in #ops if it moves. " * 3


@pytest.fixture
def registry():  # type: ignore[no-untyped-def]
    async def lookup(context: Any, arguments: dict[str, Any]) -> str:
        await asyncio.sleep(0.5)  # long enough for its progress to be shown
        return "42"

    tools = builtin_registry()
    tools.register(ToolSpec(
        name="lookup", description="Look something up",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}, run=lookup,
    ))
    return tools


@pytest.fixture
async def bot(db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, registry) -> AsyncIterator[SlackBot]:  # type: ignore[no-untyped-def]
    started = await start_bot(db, slack_emulator, openai_emulator.base_url, registry=registry, slack_native_streaming="auto")
    yield started
    await started.stop()


def calls(slack: SlackEmulator, method: str) -> list[dict]:
    return [c.params for c in slack.calls if c.method == method and c.error is None and c.status == 200]


def rendered(text: str) -> str:
    return text.replace("@here", "@\u200bhere")


async def answered_once(slack: SlackEmulator, thread_ts: str, answer: str, bot: SlackBot) -> None:
    """The thread ends with exactly one bot message, whose whole text is the answer (nothing lost, nothing twice)."""
    assert await eventually(lambda: any(m.text == rendered(answer) for m in bot_replies(slack, CHANNEL, thread_ts)))
    assert await eventually(lambda: bot.adapter.inflight_answers == 0)
    [reply] = bot_replies(slack, CHANNEL, thread_ts)
    assert reply.text == rendered(answer)


async def test_an_answer_streams_natively_with_start_append_stop(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    openai_emulator.script(Text(ANSWER, chunk_chars=12, delay_s=0.03))
    event = mention(slack, CHANNEL, "when is the deploy window?")
    await slack.deliver_event(bot.url, event)
    await answered_once(slack, event["ts"], ANSWER, bot)
    [reply] = bot_replies(slack, CHANNEL, event["ts"])
    assert reply.stream is not None and reply.stream.stopped_by == "stop"
    [start] = calls(slack, "chat.startStream")
    assert start["thread_ts"] == event["ts"]
    assert (start["recipient_user_id"], start["recipient_team_id"]) == (ALICE, slack.team_id)
    assert calls(slack, "chat.appendStream"), "the text between start and stop is appended"
    assert len(calls(slack, "chat.stopStream")) == 1
    # Appends are the text in order, each piece once: together they are the answer.
    assert "".join(reply.stream.appends) == rendered(ANSWER)
    assert not calls(slack, "chat.update") and not calls(slack, "chat.postMessage")
    assert "▌" not in "".join(reply.stream.appends), "Slack shows its own streaming indicator"
    assert (bot.adapter.native.counts.native, bot.adapter.native.counts.fell_back) == (1, 0)


async def test_tool_progress_is_shown_as_tasks(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    openai_emulator.script(
        ToolCalls([Call("lookup", '{"q": "6*7"}', id="call_1")], text="Let me work that out first. "),
        Text("It is 42."),
    )
    event = mention(slack, CHANNEL, "what is 6*7?")
    await slack.deliver_event(bot.url, event)
    answer = "Let me work that out first. It is 42."
    await answered_once(slack, event["ts"], answer, bot)
    [reply] = bot_replies(slack, CHANNEL, event["ts"])
    assert reply.stream is not None
    tasks = [(c["id"], c["status"]) for c in reply.stream.chunks if c["type"] == "task_update"]
    assert tasks == [("task_1", "in_progress"), ("task_1", "complete")]
    assert "lookup" in reply.stream.chunks[0]["title"]


@pytest.mark.parametrize("error", ["ratelimited", "method_not_supported", "messaging_processing_failed"])
async def test_an_answer_switches_to_post_update_mid_stream_without_losing_or_repeating_text(
    error: str, bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    slack.fail_next("chat.appendStream", error=error, times=1000)
    openai_emulator.script(Text(ANSWER, chunk_chars=12, delay_s=0.03))
    event = mention(slack, CHANNEL, "when is the deploy window?")
    await slack.deliver_event(bot.url, event)
    await answered_once(slack, event["ts"], ANSWER, bot)
    [reply] = bot_replies(slack, CHANNEL, event["ts"])
    assert reply.stream is not None and reply.stream.appends[0], "it began as a stream, with its first text"
    assert calls(slack, "chat.update"), "then went on with chat.update of the same message"
    assert not calls(slack, "chat.postMessage"), "no second message"
    assert bot.adapter.native.counts.fell_back == 1


async def test_a_workspace_without_streaming_answers_with_post_update_and_is_not_asked_again(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    slack.refuse_streaming()
    openai_emulator.script(Text(ANSWER, chunk_chars=12, delay_s=0.03), Text("Second answer.", delay_s=0.05))
    first = mention(slack, CHANNEL, "when is the deploy window?")
    await slack.deliver_event(bot.url, first)
    await answered_once(slack, first["ts"], ANSWER, bot)
    [reply] = bot_replies(slack, CHANNEL, first["ts"])
    assert reply.stream is None and reply.posted_text, "posted (and updated) instead"
    second = mention(slack, CHANNEL, "and again?")
    await slack.deliver_event(bot.url, second)
    await answered_once(slack, second["ts"], "Second answer.", bot)
    assert len([c for c in slack.calls if c.method == "chat.startStream"]) == 1, "the refusal is remembered"


async def test_a_stream_slack_ended_goes_on_with_chat_update(
    db, openai_emulator: OpenAIEmulator  # type: ignore[no-untyped-def]
) -> None:
    async with SlackEmulator(time_scale=0.05, stream_timeout_s=4.0) as slack:  # a stream lives 0.2 s real
        bot = await start_bot(db, slack, openai_emulator.base_url, slack_native_streaming="auto")
        try:
            openai_emulator.script(Text(ANSWER, chunk_chars=12, delay_s=0.05))
            event = mention(slack, CHANNEL, "when is the deploy window?")
            await slack.deliver_event(bot.url, event)
            await answered_once(slack, event["ts"], ANSWER, bot)
            [reply] = bot_replies(slack, CHANNEL, event["ts"])
            assert reply.stream is not None and reply.stream.stopped_by in ("timeout", "update")
            assert calls(slack, "chat.update")
        finally:
            await bot.stop()


async def test_a_final_that_rewrites_streamed_text_replaces_it_whole(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    """A citation that names no source is removed from the final: the stream stops and an update sets the text."""
    slack = slack_emulator
    openai_emulator.script(Text("The window is Tuesday [7] and it is fixed for the whole quarter, as agreed.", chunk_chars=8,
                                delay_s=0.03))
    event = mention(slack, CHANNEL, "when?")
    await slack.deliver_event(bot.url, event)
    await answered_once(slack, event["ts"], "The window is Tuesday and it is fixed for the whole quarter, as agreed.", bot)
    assert calls(slack, "chat.update")


async def test_a_long_answer_rolls_over_into_a_second_message_without_losing_text(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    long_answer = "".join(f"Paragraph {n}: the deploy window is Tuesday at ten, after the standup.\n\n" for n in range(80))
    openai_emulator.script(Text(long_answer, chunk_chars=200, delay_s=0.02))
    event = mention(slack, CHANNEL, "tell me at length")
    await slack.deliver_event(bot.url, event)
    assert await eventually(lambda: bot.adapter.inflight_answers == 0 and len(bot_replies(slack, CHANNEL, event["ts"])) >= 2)
    parts = [m.text for m in bot_replies(slack, CHANNEL, event["ts"])]
    assert "".join(parts).replace("\n", "") == long_answer.replace("\n", ""), "every paragraph once, in order"
    assert all("▌" not in part for part in parts)
