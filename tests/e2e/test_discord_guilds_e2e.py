"""Discord guilds joining and leaving, end to end (issue 25's Discord item): the welcome line once, where the bot may
post; a guild outside DISCORD_GUILD_IDS left; a removed guild's pending work dropped (another guild's untouched), its
data kept or purged; and `relaybot doctor`'s install link with the permissions the bot needs."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from urllib.parse import parse_qs, urlsplit

import discord
import pytest

from adapters.discord import DISCORD, DiscordAdapter
from adapters.discord.guilds import welcome_line
from adapters.discord.install import NEEDS, needed_permissions
from core.config import Settings
from core.ports import FinalPart, PendingFinal
from core.store.db import Database
from core.store.pending_finals import PendingFinals
from tests.adapters.discord.harness import (
    DeployTool, approval_message, bot_messages, button_ids, running_bot, wait_for_text,
)
from tests.emulators.discord import DiscordEmulator, StoredMessage
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls

pytestmark = pytest.mark.timeout(90)

DEPLOY = ToolCalls([Call("deploy", '{"env": "prod"}')])


async def joined(dc: DiscordEmulator, adapter: DiscordAdapter, guild_id: int) -> discord.Guild:
    await dc.add_bot_to_guild(guild_id)
    return await dc.wait_for(lambda: adapter.client.get_guild(guild_id), what=f"guild {guild_id} joined")


def welcomes(dc: DiscordEmulator, channel_id: int) -> list[StoredMessage]:
    return [m for m in bot_messages(dc, channel_id) if m.content.startswith("👋")]


async def test_a_join_of_an_allowed_guild_is_welcomed_once_in_its_system_channel_never_where_the_bot_cannot_post(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture,
) -> None:
    dc = discord_emulator
    owner = dc.add_user("owner")
    dc.add_guild("home")
    async with AsyncExitStack() as stack:
        # Two processes hear the join (as while a shard changes hands): one welcome between them.
        first, _ = await stack.enter_async_context(running_bot(dc, db, openai_emulator))
        second, _ = await stack.enter_async_context(running_bot(dc, db, openai_emulator))
        welcoming = dc.add_guild("welcoming", owner_id=owner, bot_added=False)
        system, other = dc.add_channel(welcoming, "welcome"), dc.add_channel(welcoming, "general")
        dc.set_system_channel(welcoming, system)
        muted = dc.add_guild("muted", owner_id=owner, bot_added=False)
        muted_system = dc.add_channel(muted, "announcements")
        dc.set_system_channel(muted, muted_system)
        dc.mute_bot_in(muted_system)
        bare = dc.add_guild("no system channel", owner_id=owner, bot_added=False)
        bare_channel = dc.add_channel(bare, "general")
        with caplog.at_level(logging.INFO, logger="adapters.discord.guilds"):
            for guild_id in (welcoming, muted, bare):
                await joined(dc, first, guild_id)
                await dc.wait_for(lambda: second.client.get_guild(guild_id), what="the second process's join")
            await dc.wait_for(lambda: welcomes(dc, system), what="the welcome line")
            await dc.wait_for(lambda: "no system channel: no welcome line" in caplog.text, what="the bare guild's log")
            await dc.wait_for(lambda: "may not post" in caplog.text, what="the muted guild's log")
            await asyncio.sleep(0.3)  # a second welcome, from the other process, would be here by now
    [welcome] = welcomes(dc, system)
    assert welcome.content == welcome_line("relaybot")
    assert welcome.allowed_mentions is not None and welcome.allowed_mentions["parse"] == []
    assert bot_messages(dc, other) == [] and bot_messages(dc, muted_system) == [] and bot_messages(dc, bare_channel) == []
    # The muted channel was never even tried: the bot read its permissions first.
    posts = [r.path for r in dc.requests_to("message_create")]
    assert not any(str(muted_system) in path for path in posts) and dc.requests_to("guild_leave") == []


async def test_a_join_of_a_guild_outside_discord_guild_ids_is_left_with_a_log_line(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture,
) -> None:
    dc = discord_emulator
    owner = dc.add_user("owner")
    allowed = dc.add_guild("allowed")
    stranger = dc.add_guild("stranger", owner_id=owner, bot_added=False)
    stranger_system = dc.add_channel(stranger, "welcome")
    dc.set_system_channel(stranger, stranger_system)
    async with running_bot(dc, db, openai_emulator, discord_guild_ids=(str(allowed),)) as (adapter, _engine):
        with caplog.at_level(logging.INFO, logger="adapters.discord.guilds"):
            await dc.add_bot_to_guild(stranger)
            await dc.wait_for(lambda: dc.requests_to("guild_leave"), what="the bot leaving")
            await dc.wait_for(lambda: stranger not in dc.world.bot_guild_ids() and adapter.client.get_guild(stranger) is None,
                              what="the guild gone")
        assert [g.id for g in adapter.client.guilds] == [allowed]
    assert [r.status for r in dc.requests_to("guild_leave")] == [204]
    assert bot_messages(dc, stranger_system) == []  # no welcome where the bot does not stay
    assert f"{stranger} (stranger), which is not in DISCORD_GUILD_IDS: leaving it" in caplog.text


async def ask_for_approval(dc: DiscordEmulator, channel: int, asker: int) -> tuple[int, StoredMessage]:
    asked = await dc.send_user_message(channel, asker, "deploy please", mentions_bot=True)
    thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
    return thread.id, await dc.wait_for(lambda: approval_message(dc, thread.id), what="approval message")


async def continuation_statuses(db: Database, guild_id: int) -> list[str]:
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT status FROM continuations WHERE platform = 'discord' AND state -> 'conversation' ->> 'workspace' = %s",
            (str(guild_id),))
        return [str(row[0]) for row in await cursor.fetchall()]


async def kept_final(db: Database, guild_id: int, channel_id: int, text: str) -> None:
    """A final a dead process kept and handed over: the next delivery round posts it."""
    dead = PendingFinals(db, owner=f"dead-{guild_id}")
    await dead.keep(PendingFinal(answer_id=f"answer-{guild_id}", platform="discord", workspace=str(guild_id),
                                 channel=str(channel_id), thread="", parts=(FinalPart(text=text),)))
    await dead.release(f"answer-{guild_id}")


async def count(db: Database, sql: str, guild_id: int) -> int:
    async with db.connection() as conn:
        cursor = await conn.execute(sql, (str(guild_id),))
        row = await cursor.fetchone()
        return int(row[0]) if row else 0


CONVERSATIONS = "SELECT count(*) FROM conversations WHERE platform = 'discord' AND workspace = %s"
FINALS = "SELECT count(*) FROM pending_finals WHERE platform = 'discord' AND workspace = %s"


@pytest.mark.parametrize("uninstall_data", ["keep", "purge"])
async def test_a_removal_drops_that_guilds_approval_and_kept_final_and_leaves_another_guilds_untouched(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture,
    uninstall_data: str,
) -> None:
    dc, tool = discord_emulator, DeployTool()
    alice = dc.add_user("alice")
    removed, kept = dc.add_guild("removed"), dc.add_guild("kept")
    removed_news, kept_news = dc.add_channel(removed, "news"), dc.add_channel(kept, "news")
    removed_ops, kept_ops = dc.add_channel(removed, "ops"), dc.add_channel(kept, "ops")
    openai_emulator.script(DEPLOY, DEPLOY, Text("Deployed to prod."))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry(), uninstall_data=uninstall_data) as (adapter, _):
        _, removed_approval = await ask_for_approval(dc, removed_ops, alice)
        kept_thread, kept_approval = await ask_for_approval(dc, kept_ops, alice)
        await kept_final(db, removed, removed_news, "the removed guild's final")
        await kept_final(db, kept, kept_news, "the kept guild's final")
        assert await continuation_statuses(db, removed) == ["pending"] == await continuation_statuses(db, kept)

        with caplog.at_level(logging.INFO):
            await dc.remove_bot_from_guild(removed)
            await dc.wait_for(lambda: f"removed from Discord guild {removed}" in caplog.text, what="the removal's log line")
        await adapter.maintain()  # the next delivery round: only the kept guild's final is left to deliver

        assert [m.content for m in bot_messages(dc, kept_news)] == ["the kept guild's final"]
        assert bot_messages(dc, removed_news) == []
        assert await count(db, FINALS, removed) == 0 == await count(db, FINALS, kept)
        # The kept guild's approval still decides and resumes; the removed guild's is closed, its buttons inert.
        await dc.click_button(kept_approval.id, button_ids(kept_approval)[0], alice)
        await dc.wait_for(lambda: bot_messages(dc, kept_thread)[-1].content == "Deployed to prod.", what="resumed")
    assert tool.runs == [{"env": "prod"}]
    assert await continuation_statuses(db, kept) == ["done"]
    if uninstall_data == "keep":
        assert await continuation_statuses(db, removed) == ["expired"]
        assert await count(db, CONVERSATIONS, removed) == 1, "its data is kept for a reinstall"
        assert f"removed from Discord guild {removed} (removed): 0 answer(s) in flight stopped, its pending work dropped and its data kept" in caplog.text
    else:
        assert await continuation_statuses(db, removed) == [] and await count(db, CONVERSATIONS, removed) == 0
        assert "purged (UNINSTALL_DATA=purge)" in caplog.text
    assert await count(db, CONVERSATIONS, kept) == 1
    assert removed_approval.id in dc.world.messages  # nothing was posted or edited in a guild the bot is not in


async def test_a_discord_outage_of_a_guild_is_not_a_removal_and_drops_nothing(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture,
) -> None:
    dc = discord_emulator
    flaky = dc.add_guild("flaky")
    dc.add_channel(flaky, "general")
    async with running_bot(dc, db, openai_emulator, uninstall_data="purge") as (adapter, _engine):
        alive = PendingFinals(db, owner="alive-elsewhere")
        await alive.keep(PendingFinal(answer_id="answer-flaky", platform="discord", workspace=str(flaky), channel="1",
                                      thread="", parts=(FinalPart(text="kept"),)))
        with caplog.at_level(logging.INFO, logger="adapters.discord.guilds"):
            await dc.guild_outage(flaky)
            await dc.wait_for(lambda: (g := adapter.client.get_guild(flaky)) is not None and g.unavailable, what="outage")
            await asyncio.sleep(0.2)  # a removal's handler would have run by now
    assert await count(db, FINALS, flaky) == 1, "a guild out of reach for a while keeps its pending work and data"
    assert "removed from Discord guild" not in caplog.text


async def test_doctor_prints_an_install_link_whose_permissions_are_the_computed_flags(
    discord_emulator: DiscordEmulator,
) -> None:
    dc = discord_emulator
    settings = Settings(_env_file=None, discord_token=dc.token, discord_api_base=dc.api_base)
    line = await DISCORD.doctor(settings)
    assert line.startswith("ok — logged in as relaybot") and "\n" not in line
    link = line.rsplit(" ", 1)[1]
    parts = urlsplit(link)
    query = {key: values[0] for key, values in parse_qs(parts.query).items()}
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "discord.com", "/oauth2/authorize")
    assert query["client_id"] == str(dc.application_id)
    assert query["scope"].split() == ["bot", "applications.commands"]
    granted = discord.Permissions(int(query["permissions"]))
    assert int(query["permissions"]) == needed_permissions().value
    # Each flag's own bit, summed: the link asks for exactly the listed permissions.
    assert granted.value == sum(discord.Permissions(**{need.flag: True}).value for need in NEEDS)
    assert len(NEEDS) == bin(granted.value).count("1")
    # What the bot does needs these, and nothing beyond them (no Administrator, no Manage Server).
    assert granted.send_messages_in_threads and granted.create_public_threads and granted.read_message_history
    assert not (granted.administrator or granted.manage_guild or granted.mention_everyone)


LONG = "A long answer that keeps streaming for a while, word after word, so that it is still going. " * 5


async def test_a_removal_stops_that_guilds_answer_in_flight_and_lets_another_guilds_finish(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture,
) -> None:
    dc = discord_emulator
    alice = dc.add_user("alice")
    removed, kept = dc.add_guild("removed"), dc.add_guild("kept")
    removed_channel, kept_channel = dc.add_channel(removed, "general"), dc.add_channel(kept, "general")
    openai_emulator.script(*(Text(LONG.strip(), chunk_chars=6, delay_s=0.06) for _ in range(2)))
    async with running_bot(dc, db, openai_emulator) as (adapter, _engine):
        threads = []
        for channel in (removed_channel, kept_channel):
            asked = await dc.send_user_message(channel, alice, "tell me everything", mentions_bot=True)
            threads.append((await dc.wait_for(lambda: dc.thread_of(asked), what="thread")).id)
        removed_thread, kept_thread = threads
        await dc.wait_for(lambda: all(bot_messages(dc, t) for t in threads), what="both answers streaming")
        assert adapter.runner.inflight == 2
        with caplog.at_level(logging.INFO, logger="adapters.discord.guilds"):
            await dc.remove_bot_from_guild(removed)
            # Stopped at once, not when its model stream ends seconds later.
            await dc.wait_for(lambda: adapter.runner.inflight == 1, timeout=1.5, what="the removed guild's answer stopped")
            await dc.wait_for(lambda: f"removed from Discord guild {removed}" in caplog.text, what="the removal's log line")
        await wait_for_text(dc, kept_thread, LONG.strip(), timeout=20)
    assert f"removed from Discord guild {removed} (removed): 1 answer(s) in flight stopped" in caplog.text
    shown = "".join(m.content for m in bot_messages(dc, removed_thread))
    assert LONG.strip() not in shown, "the removed guild's answer was cut short"
    for table in ("pending_finals", "live_messages"):
        assert await count(db, f"SELECT count(*) FROM {table} WHERE platform = 'discord' AND workspace = %s", removed) == 0
