"""Crash repair on Discord finds an answer's part however a crash left it showing, and puts the interrupted note on the
answer's last message only (issue 20, note-on-an-earlier-part): a later part is the bot's message replying to the
part before it, the first part the bot's message showing the answer's start."""

from __future__ import annotations

import time

import pytest

from adapters.answers import intent_id
from adapters.discord.surface import DiscordShownMessages
from adapters.discord.transport import ChannelTransport
from adapters.streaming import MonotonicClock
from core.ports import LiveMessage
from core.store.db import Database
from tests.adapters.discord.harness import bot_messages, make_world, running_bot
from tests.e2e.test_unseen_post_repair import NOTE_MARK, died_before_the_reply, live_records
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator

pytestmark = pytest.mark.timeout(60)

FIRST = "The first part of the answer, sealed when it rolled over into the next message. " * 3
SECOND = "The second part, posted whole as the final text went out."


async def test_a_later_part_posted_whole_unseen_gets_the_note_and_the_part_before_keeps_its_text(
    db: Database, discord_emulator: DiscordEmulator, openai_emulator: OpenAIEmulator
) -> None:
    """The process posted part 1 with its final text (no cursor) and died before the reply: before, find_post took
    only a message still streaming, so the note went on part 0, in the middle of the answer."""
    dc = discord_emulator
    world = make_world(dc)
    async with running_bot(dc, db, openai_emulator) as (adapter, _engine):
        channel = adapter.client.get_partial_messageable(world.channel_id)
        place = {"platform": "discord", "workspace": str(world.guild_id), "channel": str(world.channel_id)}
        answer = ChannelTransport(channel)
        first = await answer.post(FIRST.strip(), key="answer-cut:0")
        await died_before_the_reply(db, LiveMessage(**place, message_id=first), answer_id="answer-cut")
        at = time.time()
        # Another answer's whole message in the channel, posted after the attempt: never this part.
        other = await ChannelTransport(channel).post("Another answer, whole and done.", key="answer-other:0")
        second = await answer.post(SECOND, key="answer-cut:1")  # replies to the part before it
        await died_before_the_reply(db, LiveMessage(
            **place, message_id=intent_id("answer-cut", 1, at, after=first)), answer_id="answer-cut")

        shown_messages = DiscordShownMessages(adapter.client, adapter.budgets, MonotonicClock())
        assert await adapter.runner.repair_leftovers(shown_messages) == 2
        shown = {str(m.id): m.content for m in bot_messages(dc, world.channel_id)}
        assert shown[first] == FIRST.strip(), "an earlier part keeps its text, with no note in the middle"
        assert shown[second].startswith(SECOND) and shown[second].rstrip().endswith("please ask again.")
        assert NOTE_MARK in shown[second]
        assert shown[other] == "Another answer, whole and done."
        assert await live_records(db, str(world.channel_id)) == []


async def test_a_first_part_a_crash_left_without_cursor_is_found_by_the_answers_start(
    db: Database, discord_emulator: DiscordEmulator, openai_emulator: OpenAIEmulator
) -> None:
    """The first post's reply was lost, the retry found the message and sealed it with its final slice, and the
    process died before that edit's reply: the message shows no cursor, and before it was never found (no note)."""
    dc = discord_emulator
    world = make_world(dc)
    async with running_bot(dc, db, openai_emulator) as (adapter, _engine):
        channel = adapter.client.get_partial_messageable(world.channel_id)
        place = {"platform": "discord", "workspace": str(world.guild_id), "channel": str(world.channel_id)}
        at = time.time()
        other = await ChannelTransport(channel).post("Another answer, whole and done.", key="answer-other:0")
        mine = await ChannelTransport(channel).post(FIRST.strip(), key="answer-sealed:0")
        await died_before_the_reply(db, LiveMessage(
            **place, message_id=intent_id("answer-sealed", 0, at, head=FIRST[:48])), answer_id="answer-sealed")

        shown_messages = DiscordShownMessages(adapter.client, adapter.budgets, MonotonicClock())
        assert await adapter.runner.repair_leftovers(shown_messages) == 1
        shown = {str(m.id): m.content for m in bot_messages(dc, world.channel_id)}
        assert shown[mine].startswith(FIRST.strip()[:100]) and NOTE_MARK in shown[mine]
        assert shown[other] == "Another answer, whole and done."
        assert await live_records(db, str(world.channel_id)) == []
