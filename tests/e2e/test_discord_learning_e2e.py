"""Learning from Discord channels end to end: the real DiscordAdapter (discord.py) against the Discord emulator, the
engine's ChannelLearningService and the visibility rule over the test Postgres, the model emulator's prompts read.

A channel with an active and an archived thread backfilled, its answers citing the jump URL; a backfill stopped
half-way goes on from its checkpoint without reading or storing anything twice; an edit, a delete and a new message
reach what the model is given; a private channel's passage never reaches a channel whose members differ (nor a
DM), a public one's does; `/relaybot config learn` turns learning on and off and says why it cannot."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import discord
import pytest

from adapters.discord import DiscordAdapter
from core.engine import Engine
from core.learning.model import ChannelPlace
from core.learning.service import ChannelLearningService
from core.learning.visibility import ChannelVisibility
from core.retrieval.search import PgRetriever
from core.store.db import Database
from core.tools import ToolServices
from core.tools.read_conversation import PlatformReaders
from tests.adapters.discord.harness import bot_settings, tuning_for
from tests.e2e.test_discord_admin_e2e import answered
from tests.emulators.discord import DiscordEmulator, point_discord_py_at
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine
from tests.support.ports import ports_for
from tests.support.learning import indexed_texts, learn, stored

pytestmark = pytest.mark.timeout(120)

DAY = 86_400.0
VIEW_CHANNEL = 1 << 10
# How the prompt numbers a passage: "[n] title (uri)" (core/sources.py render_numbered).
_NUMBERED = re.compile(r"^\[(\d+)\] (.+) \((\S+)\)$", re.M)


@dataclass(kw_only=True)
class LearningBot:
    adapter: DiscordAdapter
    engine: Engine
    learning: ChannelLearningService


@asynccontextmanager
async def learning_bot(dc: DiscordEmulator, db: Database, llm_url: str, **overrides: Any) -> AsyncIterator[LearningBot]:
    """A bot process as bot/runtime.py wires learning: one service lent to the adapter (ports.learning), the adapter's
    history door attached to it and its facts to the retriever's visibility rule."""
    visibility = ChannelVisibility()
    readers = PlatformReaders()
    settings = bot_settings(dc, **{"discord_message_content_intent": True, **overrides})
    engine = make_engine(db, llm_url, retriever=PgRetriever(db, None, visibility=visibility),
                         tool_services=ToolServices(conversations=readers), **settings)
    learning = ChannelLearningService(db, embedder=None, settings=engine.settings)
    adapter = DiscordAdapter(settings=engine.settings, engine=engine, ports=ports_for(db, learning=learning),
                             tuning=tuning_for(dc.time_scale))
    learning.attach(adapter.platform, adapter.channel_history)
    visibility.attach(adapter.platform, adapter.channel_facts)
    readers.register(adapter.platform, adapter.reader)
    with point_discord_py_at(dc):
        await adapter.start()
        try:
            yield LearningBot(adapter=adapter, engine=engine, learning=learning)
        finally:
            await adapter.stop_accepting()
            await adapter.close()
            await learning.close()


@pytest.fixture(autouse=True)
async def no_sources(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")


@dataclass(kw_only=True)
class Guild:
    id: int
    owner: int
    ana: int
    bob: int
    incidents: int
    general: int


def guild(dc: DiscordEmulator) -> Guild:
    owner = dc.add_user("owner")
    guild_id = dc.add_guild("Test guild", owner_id=owner)
    return Guild(id=guild_id, owner=owner, ana=dc.add_user("ana"), bob=dc.add_user("bob"),
                 incidents=dc.add_channel(guild_id, "incidents"), general=dc.add_channel(guild_id, "general"))


@dataclass(kw_only=True)
class History:
    root: int
    reply: int
    plain: int
    hangar: int


def incidents_history(dc: DiscordEmulator, g: Guild) -> History:
    """#incidents: a thread 30 days old (ana's message, bob's reply) still active, a thread started without a message
    and archived since, a plain message, a webhook's, and one too old to read."""
    now = time.time()
    dc.post_at(g.incidents, g.ana, "the old mainframe caught fire", at=now - 400 * DAY)
    root = dc.post_at(g.incidents, g.ana, "the payments database ran out of disk", at=now - 30 * DAY)
    thread = dc.thread_at(root, "payments outage", by=g.ana, at=now - 30 * DAY)
    reply = dc.post_at(thread, g.bob, "grew the volume to 2 TB, payments are back", at=now - 30 * DAY + 300)
    hangar = dc.thread_without_message_at(g.incidents, "zeppelin hangar", by=g.bob, at=now - 20 * DAY,
                                          archived_at=now - 19 * DAY)
    dc.post_at(hangar, g.bob, "the hangar doors are stuck half open", at=now - 20 * DAY + 60)
    plain = dc.post_at(g.incidents, g.bob, "the staging cluster is frozen for the audit", at=now - 5 * DAY)
    return History(root=root, reply=reply, plain=plain, hangar=hangar)


def place(g: Guild, channel: int) -> ChannelPlace:
    return ChannelPlace(platform="discord", workspace=str(g.id), channel=str(channel))


async def settled(bot: LearningBot) -> None:
    """Every live event heard so far taken by the engine and searchable."""
    await asyncio.sleep(0.1)  # the gateway's frames in flight reach the client
    await bot.adapter._learning.events.feed.drained()
    await bot.learning.settled()


def prompt(openai: OpenAIEmulator) -> str:
    return json.dumps(openai.chat_requests[-1]["messages"], ensure_ascii=False)


async def ask(dc: DiscordEmulator, openai: OpenAIEmulator, channel: int, question: str, *, user: int,
              answer: str = "Noted.", direct: bool = False) -> str:
    """The question asked (mentioning the bot in a channel, or in a DM); the prompt the model was given for it."""
    asked = len(openai.chat_requests)
    openai.script(Text(answer))
    if direct:
        await dc.send_dm(user, question)
    else:
        await dc.send_user_message(channel, user, question, mentions_bot=True)
    await dc.wait_for(lambda: len(openai.chat_requests) > asked, timeout=20.0, what="the model asked")
    return prompt(openai)


async def test_a_channel_with_an_archived_thread_is_backfilled_and_its_answers_cite_the_jump_url(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    g = guild(dc)
    h = incidents_history(dc, g)
    await dc.send_webhook_message(g.incidents, "pagerduty", "pagerduty: payments alert resolved")
    async with learning_bot(dc, db, openai_emulator.base_url) as bot:
        await learn(bot.learning, place(g, g.incidents))
        learned = await bot.learning.get(place(g, g.incidents))
        assert learned is not None and learned.name == "incidents" and not learned.private
        given = await ask(dc, openai_emulator, g.incidents, "what happened to the payments database?", user=g.ana,
                          answer="It ran out of disk; the volume was grown [1].")
        assert "ana: the payments database ran out of disk" in given
        assert "bob: grew the volume to 2 TB" in given
        assert "pagerduty" not in given and "mainframe" not in given  # a webhook's message; older than 90 days
        day = datetime.fromtimestamp(dc.message(h.root).versions[0].at, tz=timezone.utc).strftime("%Y-%m-%d")
        title = f"#incidents — {day}, thread by ana"
        link = f"https://discord.com/channels/{g.id}/{g.incidents}/{h.root}"
        system = openai_emulator.chat_requests[-1]["messages"][0]["content"]
        assert (title, link) in {(t, uri) for _, t, uri in _NUMBERED.findall(system)}
        question = next(m for m in dc.messages(g.incidents) if "what happened" in m.content)
        embeds = await dc.wait_for(lambda: [m for m in dc.messages(question.id) if m.embeds], what="the sources")
        assert f"[{discord.utils.escape_markdown(title)}]({link})" in embeds[0].embeds[0]["description"]
        # The archived thread, started without a message, is read too.
        given = await ask(dc, openai_emulator, g.incidents, "why are the hangar doors stuck?", user=g.ana)
        assert "bob: the hangar doors are stuck half open" in given
        started = datetime.fromtimestamp(dc.world.channels[h.hangar].created_at, tz=timezone.utc).strftime("%Y-%m-%d")
        system = openai_emulator.chat_requests[-1]["messages"][0]["content"]
        assert (f"#incidents — {started}, thread by bob", f"https://discord.com/channels/{g.id}/{h.hangar}") in {
            (t, uri) for _, t, uri in _NUMBERED.findall(system)}


async def test_a_backfill_stopped_half_way_goes_on_from_its_checkpoint_without_duplicates(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    g = guild(dc)
    now = time.time()
    written = [str(dc.post_at(g.incidents, g.ana, f"status update number {n}", at=now - DAY + n * 60))
               for n in range(350)]
    source = f"channel:discord:{g.id}:{g.incidents}"
    where = place(g, g.incidents)
    history_path = f"/api/v10/channels/{g.incidents}/messages"
    # One call a second on the bot-wide budget: the backfill's four pages take seconds, so it can be stopped.
    slow = {"discord_global_requests_per_s": 1}
    async with learning_bot(dc, db, openai_emulator.base_url, **slow) as first:
        await first.learning.add(where, since_days=30, keep_days=None)
        backfill = asyncio.create_task(first.learning.run_due())
        await dc.wait_for(lambda: _at_least(db, source, 100), timeout=30.0, what="a first page stored")
        backfill.cancel()  # the process stops mid-backfill
        await asyncio.gather(backfill, return_exceptions=True)
    half = await stored(db, source)
    assert 100 <= len(half) < 350
    requests_before = len(dc.request_log)
    async with learning_bot(dc, db, openai_emulator.base_url, **slow) as second:
        for _ in range(600):
            await second.learning.run_due()
            learned = await second.learning.get(where)
            if learned is not None and learned.state == "live":
                break
            await asyncio.sleep(0.02)
        assert learned is not None and learned.state == "live"
        await second.learning.settled()
    after = [r for r in dc.request_log[requests_before:] if r.path == history_path and r.status == 200]
    # It went on from its cursor (never from the newest page again), and read each message once.
    assert after and "before=" in after[0].query, "the first page after the restart is the checkpoint's"
    assert sorted(await stored(db, source)) == sorted(written)
    seen = Counter(int(n) for text in await indexed_texts(db) for n in re.findall(r"status update number (\d+)", text))
    assert seen == Counter(range(350)), "each message in the index once"


async def _at_least(db: Database, source: str, count: int) -> bool:
    return len(await stored(db, source)) >= count


async def test_an_edit_a_delete_and_a_new_message_reach_what_the_model_is_given(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    g = guild(dc)
    h = incidents_history(dc, g)
    async with learning_bot(dc, db, openai_emulator.base_url) as bot:
        await learn(bot.learning, place(g, g.incidents))
        await dc.edit_user_message(h.reply, "grew the volume to 4 TB, payments are back")
        await settled(bot)
        given = await ask(dc, openai_emulator, g.incidents, "how big is the payments volume?", user=g.ana)
        assert "grew the volume to 4 TB" in given and "2 TB" not in given
        await dc.delete_user_message(h.plain)
        await settled(bot)
        given = await ask(dc, openai_emulator, g.incidents, "is the staging cluster frozen for the audit?", user=g.ana)
        assert "staging cluster is frozen" not in given
        # A new message in the channel (nobody mentions the bot) is learned as it comes.
        await dc.send_user_message(g.incidents, g.bob, "the ledger service moved to the new region")
        await settled(bot)
        given = await ask(dc, openai_emulator, g.general, "where did the ledger service move?", user=g.ana)
        assert "bob: the ledger service moved to the new region" in given  # a public channel's, asked elsewhere


async def test_a_private_channels_passage_never_reaches_a_channel_whose_members_differ_nor_a_dm(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    g = guild(dc)
    ops = dc.add_role(g.id, "ops")
    dc.grant_role(g.ana, ops)
    launch = dc.add_channel(g.id, "launch")
    dc.world.channels[launch].overwrites = [
        {"id": str(g.id), "type": 0, "allow": "0", "deny": str(VIEW_CHANNEL)},
        {"id": str(ops), "type": 0, "allow": str(VIEW_CHANNEL), "deny": "0"},
        {"id": str(dc.bot_user_id), "type": 1, "allow": str(VIEW_CHANNEL), "deny": "0"},
    ]
    dc.post_at(launch, g.ana, "the zeppelin launch code is 4711", at=time.time() - DAY)
    async with learning_bot(dc, db, openai_emulator.base_url) as bot:
        await learn(bot.learning, place(g, launch))
        learned = await bot.learning.get(place(g, launch))
        assert learned is not None and learned.private
        # In #general, whose members differ, never — though ana, who may view #launch, asks.
        assert "4711" not in await ask(dc, openai_emulator, g.general, "what is the zeppelin launch code?", user=g.ana)
        assert "4711" not in await ask(dc, openai_emulator, g.general, "what is the zeppelin launch code?", user=g.bob)
        # Bob's DM: never.
        assert "4711" not in await ask(dc, openai_emulator, 0, "what is the zeppelin launch code?", user=g.bob,
                                       direct=True)
        # In #launch itself it is given (the rule lets through what it should).
        assert "4711" in await ask(dc, openai_emulator, launch, "what is the zeppelin launch code?", user=g.ana)


async def test_relaybot_config_learn_turns_learning_on_and_off_and_says_why_it_cannot(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    g = guild(dc)
    incidents_history(dc, g)
    hidden = dc.add_channel(g.id, "hidden")
    dc.hide_channel_from_bot(hidden)
    async with learning_bot(dc, db, openai_emulator.base_url) as bot:
        status = await answered(dc, await dc.invoke_slash("relaybot config learn", {"action": "status"}, g.owner,
                                                          g.incidents))
        assert "does not learn from" in status
        on = await answered(dc, await dc.invoke_slash("relaybot config learn", {"action": "on", "since": 365},
                                                      g.owner, g.incidents))
        assert f"learns from <#{g.incidents}>" in on and "365 days" in on
        learned = await bot.learning.get(place(g, g.incidents))
        assert learned is not None and learned.since_days == 365
        refused = await answered(dc, await dc.invoke_slash("relaybot config learn", {"action": "on"}, g.owner, hidden))
        assert "The bot cannot view" in refused and "View Channel and Read Message History" in refused
        assert await bot.learning.get(place(g, hidden)) is None
        not_admin = await answered(dc, await dc.invoke_slash("relaybot config learn", {"action": "off"}, g.bob,
                                                             g.incidents))
        assert not_admin.startswith("Only members with Manage Server")
        off = await answered(dc, await dc.invoke_slash("relaybot config learn", {"action": "off"}, g.owner, g.incidents))
        assert "no longer learns" in off
        assert await bot.learning.get(place(g, g.incidents)) is None


async def test_what_changed_while_the_bot_was_down_is_caught_up_at_its_next_start(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    g = guild(dc)
    h = incidents_history(dc, g)
    doomed = dc.post_at(g.incidents, g.bob, "the canary deploy is paused until friday", at=time.time() - 2 * DAY)
    async with learning_bot(dc, db, openai_emulator.base_url) as bot:
        await learn(bot.learning, place(g, g.incidents))
    # Nobody listens: an edit and a delete within the re-scan window, and a new reply in a month-old thread.
    await dc.edit_user_message(h.plain, "the staging cluster is thawed, the audit is over")
    await dc.delete_user_message(doomed)
    await dc.send_user_message(h.root, g.ana, "the disk alarm fired again on the payments volume")
    async with learning_bot(dc, db, openai_emulator.base_url) as bot:
        worked = 0
        for _ in range(300):
            done = await bot.learning.run_due()
            worked += done
            if worked and not done:
                break
            await asyncio.sleep(0.02)
        assert worked, "the catch-up ran"
        await bot.learning.settled()
        given = await ask(dc, openai_emulator, g.incidents, "is the staging cluster frozen for the audit?", user=g.ana)
        assert "the staging cluster is thawed" in given and "the staging cluster is frozen" not in given
        given = await ask(dc, openai_emulator, g.incidents, "is the canary deploy paused?", user=g.ana)
        assert "until friday" not in given
        given = await ask(dc, openai_emulator, g.incidents, "did the disk alarm on the payments volume fire again?",
                          user=g.ana)
        assert "ana: the disk alarm fired again on the payments volume" in given


async def test_a_deleted_thread_takes_its_replies_out_of_what_the_model_is_given(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    g = guild(dc)
    h = incidents_history(dc, g)
    async with learning_bot(dc, db, openai_emulator.base_url) as bot:
        await learn(bot.learning, place(g, g.incidents))
        assert "grew the volume to 2 TB" in await ask(dc, openai_emulator, g.incidents, "how big is the payments volume?",
                                                       user=g.ana)
        await dc.delete_thread(h.root)
        await settled(bot)
        given = await ask(dc, openai_emulator, g.incidents, "how big is the payments volume?", user=g.ana)
        assert "grew the volume to 2 TB" not in given
