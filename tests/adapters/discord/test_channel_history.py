"""Discord's history door for learning against the emulator, through the real adapter's REST client: what it refuses
(with the sentence), history pages newest first back to `oldest`, active and archived threads, replies oldest first,
jump URLs, and every call on the bot-wide budget."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from adapters.base import AdapterPorts
from adapters.discord import DiscordAdapter
from adapters.discord.learning_parts import cli_channel_history
from adapters.streaming import Priority
from core.config import Settings
from core.learning.model import ChannelChange, ChannelPlace, LearnedChannel, LearningRefused
from core.store.db import Database
from tests.adapters.discord.harness import bot_settings, tuning_for
from tests.emulators.discord import DiscordEmulator, UploadedFile, point_discord_py_at
from tests.emulators.openai_server import OpenAIEmulator
from tests.support.engine import make_engine
from tests.support.ports import ports_for

DAY_S = 86_400.0
VIEW_CHANNEL = 1 << 10
READ_MESSAGE_HISTORY = 1 << 16


class RecordedLearning:
    """The engine's side of learning (core.learning.ports.ChannelLearning) as a test records what an adapter hands it."""

    def __init__(self) -> None:
        self.changes: list[ChannelChange] = []
        self.learned: dict[str, LearnedChannel] = {}

    async def take(self, change: ChannelChange) -> None:
        self.changes.append(change)

    def chosen(self, place: ChannelPlace) -> bool:
        return True

    async def add(self, place: ChannelPlace, *, since_days: int | None, keep_days: int | None) -> LearnedChannel:
        learned = LearnedChannel(place=place, name="", private=False, since_days=since_days or 90, keep_days=keep_days)
        self.learned[place.key] = learned
        return learned

    async def remove(self, place: ChannelPlace) -> bool:
        return self.learned.pop(place.key, None) is not None

    async def get(self, place: ChannelPlace) -> LearnedChannel | None:
        return self.learned.get(place.key)


def with_learning(ports: AdapterPorts, learning: Any) -> AdapterPorts:
    if any(f.name == "learning" for f in dataclasses.fields(ports)):
        return dataclasses.replace(ports, learning=learning)  # type: ignore[call-arg]
    object.__setattr__(ports, "learning", learning)  # until AdapterPorts has the field (adapters/base.py)
    return ports


@asynccontextmanager
async def learning_bot(
    dc: DiscordEmulator, db: Database, openai: OpenAIEmulator, *, learning: Any = None, **overrides: Any,
) -> AsyncIterator[DiscordAdapter]:
    """The real adapter with the Message Content intent set (unless told), lent `learning` as its port."""
    settings = bot_settings(dc, **{"discord_message_content_intent": True, **overrides})
    engine = make_engine(db, openai.base_url, **settings)
    ports = ports_for(db) if learning is None else with_learning(ports_for(db), learning)
    adapter = DiscordAdapter(settings=engine.settings, engine=engine, ports=ports, tuning=tuning_for(dc.time_scale))
    with point_discord_py_at(dc):
        await adapter.start()
        try:
            yield adapter
        finally:
            await adapter.close()


async def refusal(adapter: DiscordAdapter, workspace: str, channel: str) -> str:
    with pytest.raises(LearningRefused) as refused:
        await adapter.channel_history.info(workspace, channel)
    return refused.value.sentence


async def test_info_names_a_channel_and_says_private_when_everyone_cannot_view_it(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    owner = dc.add_user("owner")
    guild = dc.add_guild("g", owner_id=owner)
    public, private = dc.add_channel(guild, "incidents"), dc.add_channel(guild, "ops")
    dc.world.channels[private].overwrites = [
        {"id": str(guild), "type": 0, "allow": "0", "deny": str(VIEW_CHANNEL)},
        {"id": str(dc.bot_user_id), "type": 1, "allow": str(VIEW_CHANNEL), "deny": "0"},
    ]
    async with learning_bot(dc, db, openai_emulator) as adapter:
        shown = await adapter.channel_history.info(str(guild), str(public))
        assert (shown.name, shown.private, shown.direct) == ("incidents", False, False)
        assert (await adapter.channel_history.info(str(guild), str(private))).private


async def test_info_refuses_dms_a_missing_intent_and_a_channel_the_bot_cannot_read_each_with_its_sentence(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    owner = dc.add_user("owner")
    guild = dc.add_guild("g", owner_id=owner)
    hidden, no_history, ok = (dc.add_channel(guild, name) for name in ("hidden", "no-history", "ok"))
    dc.hide_channel_from_bot(hidden)
    dc.world.channels[no_history].overwrites = [
        {"id": str(dc.bot_user_id), "type": 1, "allow": "0", "deny": str(READ_MESSAGE_HISTORY)}]
    async with learning_bot(dc, db, openai_emulator) as adapter:
        assert "never learned from" in await refusal(adapter, "@dm", str(dc.dm_channel_id(owner)))
        assert "View Channel" in await refusal(adapter, str(guild), str(hidden))
        assert "Read Message History" in await refusal(adapter, str(guild), str(no_history))
        assert "knows no channel" in await refusal(adapter, str(guild), "123")
        voice = dc.add_channel(guild, "standup")
        dc.world.channels[voice].type = 2
        assert "not a text or announcement channel" in await refusal(adapter, str(guild), str(voice))
        # Access lost mid-backfill: the read says so in the sentence the channel's error shows.
        dc.hide_channel_from_bot(ok)
        with pytest.raises(LearningRefused) as lost:
            await adapter.channel_history.history(str(guild), str(ok), oldest=datetime.now(timezone.utc), cursor="")
        assert "View Channel" in lost.value.sentence
        dc.world.bot_hidden_channels.discard(ok)
        dc.set_message_content_intent(False)
        assert "Developer Portal" in await refusal(adapter, str(guild), str(ok))
    async with learning_bot(dc, db, openai_emulator, discord_message_content_intent=False) as adapter:
        sentence = await refusal(adapter, str(guild), str(ok))
        assert "Developer Portal" in sentence and "DISCORD_MESSAGE_CONTENT_INTENT=true" in sentence


async def test_history_pages_newest_first_back_to_oldest_with_thread_roots_files_and_jump_urls(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    guild = dc.add_guild("g")
    channel = dc.add_channel(guild, "incidents")
    ana = dc.add_user("ana")
    now = time.time()
    ids = [dc.post_at(channel, ana, f"m{i}", at=now - 40 * DAY_S + i * 0.2 * DAY_S) for i in range(200)]
    root = ids[-1]
    thread = dc.thread_at(root, "talk", by=ana, at=now - DAY_S)
    dc.post_at(thread, ana, "in the thread", at=now - 0.5 * DAY_S)
    filed = dc.post_at(channel, ana, "the log", at=now - 60, files=[UploadedFile(filename="log.txt", data=b"x")])
    hook = await dc.send_webhook_message(channel, "CI", "build failed")
    # Between two messages (they are 0.2 days apart): one exactly at the limit is in or out by the clock's millisecond.
    oldest = datetime.fromtimestamp(now - 29.9 * DAY_S, timezone.utc)
    async with learning_bot(dc, db, openai_emulator) as adapter:
        read, cursor, pages = [], "", 0
        while True:
            page = await adapter.channel_history.history(str(guild), str(channel), oldest=oldest, cursor=cursor)
            read.extend(page.messages)
            pages += 1
            if not page.next_cursor:
                break
            cursor = page.next_cursor
    within = [i for i in ids + [filed] if dc.message(i).versions[0].at >= oldest.timestamp()]
    assert pages == 2 and [m.id for m in read] == [str(i) for i in sorted([*within, hook], reverse=True)]
    by_id = {m.id: m for m in read}
    assert by_id[str(root)].thread == str(root) and by_id[str(root)].reply_count == 1
    assert by_id[str(filed)].files == ("log.txt",) and by_id[str(filed)].author_name == "ana"
    assert by_id[str(hook)].by_bot and not by_id[str(filed)].by_bot
    assert by_id[str(filed)].permalink == f"https://discord.com/channels/{guild}/{channel}/{filed}"
    assert all(m.at >= oldest for m in read)


async def test_threads_lists_active_then_archived_public_ones_until_oldest_and_replies_read_oldest_first(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    guild = dc.add_guild("g")
    channel, other = dc.add_channel(guild, "incidents"), dc.add_channel(guild, "random")
    ana = dc.add_user("ana")
    now = time.time()
    starter = dc.post_at(channel, ana, "the outage", at=now - 50 * DAY_S)
    active = dc.thread_at(starter, "outage", by=ana, at=now - 50 * DAY_S)
    replies = [dc.post_at(active, ana, f"r{i}", at=now - 49 * DAY_S + i) for i in range(130)]
    dc.thread_without_message_at(other, "elsewhere", by=ana, at=now - DAY_S)
    dc.thread_without_message_at(channel, "secret", by=ana, at=now - DAY_S, private=True)
    archived = [dc.thread_without_message_at(channel, f"old {i}", by=ana, at=now - 25 * DAY_S,
                                             archived_at=now - 20 * DAY_S + i * 60) for i in range(103)]
    dc.thread_without_message_at(channel, "long gone", by=ana, at=now - 90 * DAY_S, archived_at=now - 60 * DAY_S)
    oldest = datetime.now(timezone.utc) - timedelta(days=30)
    history = None
    async with learning_bot(dc, db, openai_emulator) as adapter:
        history = adapter.channel_history
        roots, cursor = [], ""
        while True:
            page = await history.threads(str(guild), str(channel), oldest=oldest, cursor=cursor)
            roots.extend(page.messages)
            if not page.next_cursor:
                break
            cursor = page.next_cursor
        assert len(dc.requests_to("member_get")) == 1  # ana, once for all her threads
        first = await history.replies(str(guild), str(channel), str(active), cursor="")
        second = await history.replies(str(guild), str(channel), str(active), cursor=first.next_cursor)
    assert [m.id for m in roots] == [str(active)] + [str(t) for t in reversed(archived)]
    assert roots[0].text == "outage" and roots[0].reply_count == 130 and roots[0].thread == str(active)
    assert {m.author_name for m in roots} == {"ana"}  # the creator, read once for every thread of hers
    assert roots[1].permalink == f"https://discord.com/channels/{guild}/{archived[-1]}"
    assert [m.id for m in first.messages] == [str(starter)] + [str(r) for r in replies[:100]]
    assert first.messages[0].text == "the outage" and all(m.thread == str(active) for m in first.messages)
    assert first.messages[1].permalink == f"https://discord.com/channels/{guild}/{active}/{replies[0]}"
    assert [m.id for m in second.messages] == [str(r) for r in replies[100:]] and second.next_cursor == ""


async def test_every_read_waits_its_turn_on_the_bot_wide_budget(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    guild = dc.add_guild("g")
    channel = dc.add_channel(guild, "incidents")
    async with learning_bot(dc, db, openai_emulator) as adapter:
        budget = adapter.budgets.global_budget
        assert budget is not None
        while budget.try_acquire(Priority.FINAL):
            pass  # the answers took every call there is for now
        before = len(dc.requests_to("message_list"))
        read = asyncio.create_task(adapter.channel_history.history(
            str(guild), str(channel), oldest=datetime.now(timezone.utc) - timedelta(days=1), cursor=""))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not read.done() and len(dc.requests_to("message_list")) == before
        await asyncio.wait_for(read, 10.0)  # the budget refills: the read goes, behind what was queued
        assert len(dc.requests_to("message_list")) == before + 1


async def test_the_clis_door_reads_over_rest_alone(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    guild = dc.add_guild("g")
    channel = dc.add_channel(guild, "incidents")
    ana = dc.add_user("ana")
    dc.post_at(channel, ana, "hello", at=time.time() - 60)
    settings = Settings(_env_file=None, **bot_settings(dc, discord_message_content_intent=True))  # type: ignore[call-arg]
    history = cli_channel_history(settings)
    assert history is not None
    with point_discord_py_at(dc):
        try:
            assert (await history.info(str(guild), str(channel))).name == "incidents"
            page = await history.history(str(guild), str(channel), oldest=datetime.now(timezone.utc) - timedelta(days=1),
                                         cursor="")
        finally:
            await history.close()
    assert [m.text for m in page.messages] == ["hello"]
    assert dc.live_session_count == 0
