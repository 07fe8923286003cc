"""A message a process posted but never heard back about, before it died, is found by the next process's crash repair
and finished on each platform (issue 20, unrecorded-message-after-crash): only its post's intent was recorded."""

from __future__ import annotations

import time

import pytest

from adapters.answers import intent_id
from adapters.discord.surface import DiscordShownMessages
from adapters.discord.transport import ChannelTransport
from adapters.slack.surface import ReplyTarget, SlackShownMessages
from adapters.streaming import MonotonicClock
from core.ports import LiveMessage
from core.store.db import Database
from core.store.live_messages import LiveMessages
from tests.adapters.discord.harness import bot_messages, make_world, running_bot
from tests.e2e.slack_harness import bot_replies, start_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000UNSEEN"
NOTE_MARK = "interrupted because the bot restarted"


async def died_before_the_reply(db: Database, intent: LiveMessage, *, answer_id: str) -> None:
    """What a process left when it died waiting for its post's reply: the intent record, and no heartbeat."""
    await LiveMessages(db, owner="died").add(intent, answer_id=answer_id)
    async with db.connection() as conn:
        await conn.execute("UPDATE process_heartbeats SET seen_at = now() - interval '1 hour' WHERE owner = 'died'")


async def live_records(db: Database, channel: str) -> list[str]:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT message_id FROM live_messages WHERE channel = %s", (channel,))
        return [str(row[0]) for row in await cursor.fetchall()]


async def test_a_slack_message_whose_post_reply_was_lost_is_found_by_its_metadata_and_repaired(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        thread = slack.add_user_message(CHANNEL, "a question", "U0000ALICE", None)
        transport = bot.adapter.surfaces.transport(ReplyTarget(team_id=slack.team_id, channel=CHANNEL, thread_ts=thread))
        at = time.time()
        # Another answer in the same thread, still streaming, posted after the attempt: not this post's message.
        other = await transport.post("Another answer ▌", key="answer-other:0")
        mine = await transport.post("The start of it ▌", key="answer-lost:0")
        await died_before_the_reply(db, LiveMessage(
            platform="slack", workspace=slack.team_id, channel=CHANNEL, message_id=intent_id("answer-lost", 0, at),
            thread=thread,
        ), answer_id="answer-lost")
        assert await bot.adapter.runner.repair_leftovers(SlackShownMessages(bot.adapter.surfaces)) == 1
        shown = {m.ts: m.text for m in bot_replies(slack, CHANNEL, thread)}
        assert shown[mine].startswith("The start of it") and NOTE_MARK in shown[mine] and "▌" not in shown[mine]
        assert shown[other] == "Another answer ▌", "another answer's message is left alone"
        assert await live_records(db, CHANNEL) == []
    finally:
        await bot.stop()


async def test_a_slack_native_stream_whose_start_reply_was_lost_is_found_and_repaired(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    """A native stream carries no metadata until it is stopped: the bot's message without any is the one."""
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        thread = slack.add_user_message(CHANNEL, "a question", "U0000ALICE", None)
        transport = bot.adapter.surfaces.transport(ReplyTarget(team_id=slack.team_id, channel=CHANNEL, thread_ts=thread))
        at = time.time()
        other = await transport.post("Another answer, whole", key="answer-other:0")
        started = await bot.adapter.surfaces.web.once(
            slack.team_id, "chat.startStream", channel=CHANNEL, thread_ts=thread, markdown_text="Streaming natively",
            recipient_user_id="U0000ALICE", recipient_team_id=slack.team_id,
        )
        await died_before_the_reply(db, LiveMessage(
            platform="slack", workspace=slack.team_id, channel=CHANNEL, message_id=intent_id("answer-native", 0, at),
            thread=thread,
        ), answer_id="answer-native")
        assert await bot.adapter.runner.repair_leftovers(SlackShownMessages(bot.adapter.surfaces)) == 1
        shown = {m.ts: m.text for m in bot_replies(slack, CHANNEL, thread)}
        stream = str(started["ts"])
        assert shown[stream].startswith("Streaming natively") and NOTE_MARK in shown[stream]
        assert shown[other] == "Another answer, whole"
    finally:
        await bot.stop()


async def test_a_discord_message_whose_post_reply_was_lost_is_found_by_its_cursor_and_reply_and_repaired(
    db: Database, discord_emulator: DiscordEmulator, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    world = make_world(dc)
    async with running_bot(dc, db, openai_emulator) as (adapter, _engine):
        question = await dc.send_user_message(world.channel_id, world.alice, "a question")
        elsewhere = await dc.send_user_message(world.channel_id, world.bob, "another question")
        channel = adapter.client.get_partial_messageable(world.channel_id)
        at = time.time()
        # Another answer still streaming in the channel, replying to another question: not this post's message.
        other = await ChannelTransport(channel, reply_to=elsewhere).post("Another answer ▌", key="answer-other:0")
        mine = await ChannelTransport(channel, reply_to=question).post("The start of it ▌", key="answer-lost:0")
        await died_before_the_reply(db, LiveMessage(
            platform="discord", workspace=str(world.guild_id), channel=str(world.channel_id),
            message_id=intent_id("answer-lost", 0, at), thread=f"msg-{question}",
        ), answer_id="answer-lost")
        shown_messages = DiscordShownMessages(adapter.client, adapter.budgets, MonotonicClock())
        assert await adapter.runner.repair_leftovers(shown_messages) == 1
        shown = {str(m.id): m.content for m in bot_messages(dc, world.channel_id)}
        assert shown[mine].startswith("The start of it") and NOTE_MARK in shown[mine] and "▌" not in shown[mine]
        assert shown[other] == "Another answer ▌", "another answer's message is left alone"
        assert await live_records(db, str(world.channel_id)) == []

