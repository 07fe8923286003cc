"""Nothing acked before it is durable (Slack): a question whose dedup record cannot be written is refused
(HTTP 503, no Socket Mode ack) and answered when Slack redelivers it; Slack's last retry gets one sentence."""

from __future__ import annotations

import asyncio

import pytest

from adapters import wording
from core.store.db import Database
from tests.e2e.slack_harness import bot_replies, channel_message, eventually, mention, start_bot
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator
from tests.support.outage import DatabaseOutage

pytestmark = pytest.mark.timeout(90)

CHANNEL = "C0DURABLE"
# Slack time (the emulator's minute is 3 s): redeliveries a second or so apart, room for the pool to reconnect.
QUICK_RETRIES_S = (20.0, 60.0, 60.0)


def texts(slack: SlackEmulator, thread_ts: str) -> list[str]:
    return [m.text for m in bot_replies(slack, CHANNEL, thread_ts)]


async def test_a_question_asked_while_the_database_is_down_is_refused_and_answered_on_slacks_redelivery(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, outage: DatabaseOutage
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        openai_emulator.script(Text("Answered after the outage."))
        event = mention(slack, CHANNEL, "are you there?")
        await outage.down()
        delivering = asyncio.create_task(slack.deliver_event_until_taken(bot.url, event, retry_delays_s=QUICK_RETRIES_S))
        assert await eventually(lambda: len(slack.event_deliveries) >= 1)
        await outage.up()
        deliveries = await delivering
        assert deliveries[0].status == 503, "not acked: Slack must redeliver it"
        assert deliveries[-1].status == 200 and len(deliveries) <= 3
        assert await eventually(lambda: "Answered after the outage." in texts(slack, event["ts"]))
        assert texts(slack, event["ts"]) == ["Answered after the outage."], "answered once, no sentence"
    finally:
        await bot.stop()


async def test_a_question_slack_stops_redelivering_gets_one_sentence_never_silence(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, outage: DatabaseOutage
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        event = mention(slack, CHANNEL, "still down?")
        await outage.down()
        deliveries = await slack.deliver_event_until_taken(bot.url, event, retry_delays_s=(0.0, 0.0, 0.0))
        # Refused three times; the last retry is acked, as nothing would come after it.
        assert [d.status for d in deliveries] == [503, 503, 503, 200]
        assert await eventually(lambda: texts(slack, event["ts"]) != [])
        assert texts(slack, event["ts"]) == [wording.database_unreachable()]
        assert openai_emulator.chat_requests == []
    finally:
        await bot.stop()


async def test_socket_mode_does_not_ack_a_question_it_cannot_record_and_answers_the_redelivery(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, outage: DatabaseOutage
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, socket_mode=True)
    try:
        assert await slack.wait_socket_connected(timeout_s=5.0)
        openai_emulator.script(Text("Answered over the socket."))
        event = mention(slack, CHANNEL, "socket question")
        await outage.down()
        pushing = asyncio.create_task(slack.push_socket_event_until_acked(
            slack.event_envelope(event), timeout_s=3.0, retry_delays_s=QUICK_RETRIES_S,
        ))
        # The first push goes unacked (the record timed out); the database is back before the redelivery.
        await asyncio.sleep(3.5)
        await outage.up()
        acks = await pushing
        assert acks[0] is None and acks[-1] is not None
        assert await eventually(lambda: "Answered over the socket." in texts(slack, event["ts"]))
        assert texts(slack, event["ts"]) == ["Answered over the socket."]
    finally:
        await bot.stop()


async def test_the_first_question_after_the_database_restarts_is_answered_not_lost_to_a_dead_connection(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, outage: DatabaseOutage
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        # Every connection the pool holds dies with the server; the pool does not know until it uses one.
        await outage.blip()
        openai_emulator.script(Text("Fresh connection."))
        event = mention(slack, CHANNEL, "right after the restart")
        [delivery] = await slack.deliver_event_until_taken(bot.url, event, retry_delays_s=())
        assert delivery.status == 200
        assert await eventually(lambda: "Fresh connection." in texts(slack, event["ts"]))
    finally:
        await bot.stop()


async def test_socket_mode_acks_slacks_last_retry_and_tells_the_asker(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, outage: DatabaseOutage
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, socket_mode=True)
    try:
        assert await slack.wait_socket_connected(timeout_s=5.0)
        event = mention(slack, CHANNEL, "socket, still down?")
        await outage.down()
        acks = await slack.push_socket_event_until_acked(slack.event_envelope(event), timeout_s=3.0,
                                                         retry_delays_s=(0.0, 0.0, 0.0))
        assert [ack is not None for ack in acks] == [False, False, False, True]
        assert await eventually(lambda: texts(slack, event["ts"]) != [])
        assert texts(slack, event["ts"]) == [wording.database_unreachable()]
    finally:
        await bot.stop()


async def test_events_that_are_not_questions_are_still_acked_while_the_database_is_down(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, outage: DatabaseOutage
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        await outage.down()
        # Channel chatter the bot never answers: refusing it would only make Slack count failures.
        chatter = channel_message(slack, CHANNEL, "lunch?")
        bot_post = channel_message(slack, CHANNEL, "a bot's post", subtype="bot_message")
        deliveries = [await slack.deliver_event_until_taken(bot.url, e, retry_delays_s=()) for e in (chatter, bot_post)]
        assert [[d.status for d in each] for each in deliveries] == [[200], [200]]
    finally:
        await bot.stop()
