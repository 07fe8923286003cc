"""Nothing acked before it is durable (Discord): nothing redelivers a gateway message, so one whose dedup record
cannot be written is held in memory (bounded, once per message) and answered when the database is back — or told."""

from __future__ import annotations

import asyncio

import pytest

from adapters import held, wording
from core.store.db import Database
from tests.adapters.discord.harness import bot_messages, make_world, running_bot, wait_for_text
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.outage import DatabaseOutage

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(autouse=True)
def quick_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(held, "HELD_RETRY_S", 0.5)


async def test_a_question_asked_while_the_database_is_down_is_held_and_answered_once_it_is_back(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, outage: DatabaseOutage
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("Held, then answered."))
    async with running_bot(dc, db, openai_emulator) as (adapter, _engine):
        await outage.down()
        asked = await dc.send_dm(w.alice, "are you there?")
        await dc.wait_for(lambda: adapter.gate.held == 1 or None, 10.0, what="the question held")
        # The same gateway event again (a resumed session replays it): held once, by message id.
        await dc.dispatch_message("MESSAGE_CREATE", dc.message(asked))
        await asyncio.sleep(0.3)
        assert adapter.gate.held == 1
        await outage.up()
        dm = dc.dm_channel_id(w.alice)
        await wait_for_text(dc, dm, "Held, then answered.")
        await dc.wait_for(lambda: adapter.gate.held == 0 or None, 10.0, what="nothing held")
    assert [m.content for m in bot_messages(dc, dm)] == ["Held, then answered."]
    assert len(openai_emulator.chat_requests) == 1


async def test_a_question_held_past_the_bound_gets_one_sentence_never_silence(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, outage: DatabaseOutage,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(held, "HELD_GIVE_UP_S", 3.0)
    dc = discord_emulator
    w = make_world(dc)
    async with running_bot(dc, db, openai_emulator) as (adapter, _engine):
        await outage.down()
        await dc.send_dm(w.alice, "still down?")
        dm = dc.dm_channel_id(w.alice)
        await wait_for_text(dc, dm, wording.database_unreachable())
        await dc.wait_for(lambda: adapter.gate.held == 0 or None, 10.0, what="nothing held")
    assert openai_emulator.chat_requests == []


async def test_when_the_held_queue_is_full_the_next_question_is_told_at_once(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, outage: DatabaseOutage,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(held, "HELD_MAX", 1)
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("The held one."))
    async with running_bot(dc, db, openai_emulator) as (adapter, _engine):
        await outage.down()
        await dc.send_dm(w.alice, "first")
        await dc.wait_for(lambda: adapter.gate.held == 1 or None, 10.0, what="the first held")
        await dc.send_dm(w.bob, "second")
        await wait_for_text(dc, dc.dm_channel_id(w.bob), wording.database_unreachable())
        await outage.up()
        await wait_for_text(dc, dc.dm_channel_id(w.alice), "The held one.")


async def test_a_question_held_when_the_bot_shuts_down_gets_the_sentence_before_it_goes(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, outage: DatabaseOutage
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    async with running_bot(dc, db, openai_emulator) as (adapter, _engine):
        await outage.down()
        await dc.send_dm(w.alice, "asked just before a deploy")
        await dc.wait_for(lambda: adapter.gate.held == 1 or None, 10.0, what="the question held")
        await adapter.stop_accepting()
    # Nothing else would ever answer it: the closing process told the asker.
    assert [m.content for m in bot_messages(dc, dc.dm_channel_id(w.alice))] == [wording.database_unreachable()]
