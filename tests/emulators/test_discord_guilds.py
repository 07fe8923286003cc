"""The Discord emulator's guild joins and removals: GUILD_CREATE as a join after start (to the guild's shard),
GUILD_DELETE as a removal, the system channel and the bot's permission to post there, and the bot leaving a guild."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import discord
import pytest

from tests.emulators.discord import DiscordEmulator, point_discord_py_at

CLIENT_TIMEOUT_S = 5.0


class GuildClient(discord.AutoShardedClient):
    """Notes every guild join, removal and availability it hears, as discord.py tells them apart."""

    def __init__(self, *, shard_ids: list[int] | None = None, shard_count: int | None = None) -> None:
        super().__init__(
            intents=discord.Intents.default(), guild_ready_timeout=0.05, shard_ids=shard_ids, shard_count=shard_count
        )
        self.heard: list[str] = []

    async def on_guild_join(self, guild: discord.Guild) -> None:
        self.heard.append(f"join {guild.id}")

    async def on_guild_remove(self, guild: discord.Guild) -> None:
        self.heard.append(f"remove {guild.id}")

    async def on_guild_available(self, guild: discord.Guild) -> None:
        self.heard.append(f"available {guild.id}")

    async def on_guild_unavailable(self, guild: discord.Guild) -> None:
        self.heard.append(f"unavailable {guild.id}")


@asynccontextmanager
async def connected(dc: DiscordEmulator, *clients: GuildClient) -> AsyncIterator[None]:
    with point_discord_py_at(dc):
        tasks = [asyncio.create_task(client.start(dc.token)) for client in clients]
        try:
            for client in clients:
                await asyncio.wait_for(client.wait_until_ready(), CLIENT_TIMEOUT_S)
            yield
        finally:
            for client in clients:
                await client.close()
            await asyncio.wait_for(asyncio.gather(*tasks), CLIENT_TIMEOUT_S)


async def test_a_guild_the_bot_is_added_to_after_start_arrives_as_a_join_with_its_system_channel(
    discord_emulator: DiscordEmulator,
) -> None:
    dc = discord_emulator
    owner = dc.add_user("owner")
    home = dc.add_guild("home")
    later = dc.add_guild("later", owner_id=owner, bot_added=False)
    welcome, quiet = dc.add_channel(later, "welcome"), dc.add_channel(later, "quiet")
    dc.set_system_channel(later, welcome)
    dc.mute_bot_in(quiet)
    client = GuildClient()
    async with connected(dc, client):
        assert [g.id for g in client.guilds] == [home]  # not in READY before it was added
        await dc.add_bot_to_guild(later)
        await dc.wait_for(lambda: f"join {later}" in client.heard, what="the join")
        guild = client.get_guild(later)
        assert guild is not None and guild.system_channel is not None and guild.system_channel.id == welcome
        assert guild.me.joined_at is not None and guild.me.joined_at.timestamp() > 0
        system = guild.system_channel.permissions_for(guild.me)
        muted = guild.get_channel(quiet)
        assert isinstance(muted, discord.TextChannel)
        assert system.send_messages and system.view_channel
        assert muted.permissions_for(guild.me).view_channel and not muted.permissions_for(guild.me).send_messages
        # The emulator refuses what the overwrite denies, as Discord does.
        with pytest.raises(discord.Forbidden) as refused:
            await muted.send("hello")
        assert refused.value.code == 50013
        await guild.system_channel.send("hello")
    assert client.heard == [f"available {home}", f"join {later}"]  # READY's guild is available; the new one joined
    assert [m.content for m in dc.messages(welcome)] == ["hello"] and dc.messages(quiet) == []


async def test_a_removal_is_a_guild_delete_after_which_the_guild_is_gone(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    kept, removed = dc.add_guild("kept"), dc.add_guild("removed")
    channel = dc.add_channel(removed, "general")
    client = GuildClient()
    async with connected(dc, client):
        await dc.remove_bot_from_guild(removed)
        await dc.wait_for(lambda: f"remove {removed}" in client.heard, what="the removal")
        assert [g.id for g in client.guilds] == [kept]
        with pytest.raises(discord.Forbidden):
            await client.get_partial_messageable(channel).send("still here?")
        assert [int(g["id"]) for g in await client.http.get_guilds(200)] == [kept]
    assert client.heard[-1] == f"remove {removed}" and dc.messages(channel) == []


async def test_an_outage_is_a_guild_delete_marked_unavailable_not_a_removal(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    guild_id = dc.add_guild("flaky")
    client = GuildClient()
    async with connected(dc, client):
        await dc.guild_outage(guild_id)
        await dc.wait_for(lambda: f"unavailable {guild_id}" in client.heard, what="the outage")
        guild = client.get_guild(guild_id)
        assert guild is not None and guild.unavailable
    assert f"remove {guild_id}" not in client.heard and guild_id in dc.world.bot_guild_ids()


async def test_the_bot_leaving_a_guild_is_answered_204_then_a_guild_delete_and_not_twice(
    discord_emulator: DiscordEmulator,
) -> None:
    dc = discord_emulator
    guild_id = dc.add_guild("to leave")
    client = GuildClient()
    async with connected(dc, client):
        guild = client.get_guild(guild_id)
        assert guild is not None
        await guild.leave()
        await dc.wait_for(lambda: f"remove {guild_id}" in client.heard, what="the removal after leaving")
        assert list(client.guilds) == []
        with pytest.raises(discord.NotFound):
            await guild.leave()  # no longer in it
    assert [r.status for r in dc.requests_to("guild_leave")] == [204, 404]


async def test_a_join_and_a_removal_go_to_the_guilds_shard_only(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    on_one = dc.add_guild("on shard 1", on_shard=(1, 2), bot_added=False)
    zero, one = GuildClient(shard_ids=[0], shard_count=2), GuildClient(shard_ids=[1], shard_count=2)
    async with connected(dc, zero, one):
        await dc.add_bot_to_guild(on_one)
        await dc.remove_bot_from_guild(on_one)
        await dc.wait_for(lambda: len(one.heard) == 2, what="both on shard 1")
        await asyncio.sleep(0.2)  # nothing arrives late on shard 0
    assert one.heard == [f"join {on_one}", f"remove {on_one}"] and zero.heard == []
