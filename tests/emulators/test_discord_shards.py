"""The Discord emulator's shards: `shard` in IDENTIFY, guilds and their events routed by (guild_id >> 22) % count,
DMs and their interactions on shard 0, an invalid shard refused with 4010."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import discord

from tests.emulators.discord import DiscordEmulator, point_discord_py_at
from tests.emulators.discord.gateway import shard_of

CLIENT_TIMEOUT_S = 5.0


class ShardClient(discord.AutoShardedClient):
    """Runs the shard ids it is given and notes every message and interaction it hears."""

    def __init__(self, shard_ids: list[int], shard_count: int) -> None:
        super().__init__(
            intents=discord.Intents.default(), guild_ready_timeout=0.05, shard_ids=shard_ids, shard_count=shard_count
        )
        self.heard: list[str] = []

    async def on_message(self, message: discord.Message) -> None:
        self.heard.append(f"message in {message.guild.id if message.guild else 'dm'}")

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        self.heard.append(f"interaction in {interaction.guild_id or 'dm'}")


@asynccontextmanager
async def shards(dc: DiscordEmulator, *clients: ShardClient) -> AsyncIterator[None]:
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


async def test_each_shard_gets_its_own_guilds_and_their_events_and_dms_go_to_shard_zero(
    discord_emulator: DiscordEmulator,
) -> None:
    dc = discord_emulator
    first = dc.add_guild("on shard 0", on_shard=(0, 2))
    second = dc.add_guild("on shard 1", on_shard=(1, 2))
    assert (shard_of(first, 2), shard_of(second, 2)) == (0, 1)
    channels = {guild: dc.add_channel(guild, "general") for guild in (first, second)}
    ada = dc.add_user("ada")
    zero, one = ShardClient([0], 2), ShardClient([1], 2)
    async with shards(dc, zero, one):
        assert dc.live_shards == [(0, 2), (1, 2)]
        assert [g.id for g in zero.guilds] == [first] and [g.id for g in one.guilds] == [second]
        for guild, channel in channels.items():
            await dc.send_user_message(channel, ada, "hello", mentions_bot=True)
            await dc.click_custom_id(channel, "any:button", ada)
        await dc.send_dm(ada, "a direct message")
        await dc.click_custom_id(dc.dm_channel_id(ada), "any:button", ada)
        await dc.wait_for(lambda: len(zero.heard) == 4 and len(one.heard) == 2, what="every event on its shard")
        await asyncio.sleep(0.2)  # nothing more arrives late on the wrong shard

    assert zero.heard == [f"message in {first}", f"interaction in {first}", "message in dm", "interaction in dm"]
    assert one.heard == [f"message in {second}", f"interaction in {second}"]


async def test_a_session_naming_no_shard_still_gets_every_guild(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    guilds = {dc.add_guild("a", on_shard=(0, 2)), dc.add_guild("b", on_shard=(1, 2))}
    client = discord.Client(intents=discord.Intents.default(), guild_ready_timeout=0.05)
    with point_discord_py_at(dc):
        task = asyncio.create_task(client.start(dc.token))
        try:
            await asyncio.wait_for(client.wait_until_ready(), CLIENT_TIMEOUT_S)
            assert {g.id for g in client.guilds} == guilds and dc.live_shards == [(0, 1)]
        finally:
            await client.close()
            await asyncio.wait_for(task, CLIENT_TIMEOUT_S)


async def test_an_identify_with_a_shard_id_outside_its_count_is_closed_with_4010(
    discord_emulator: DiscordEmulator,
) -> None:
    dc = discord_emulator
    async with aiohttp.ClientSession() as http, http.ws_connect(dc.gateway_url) as ws:
        hello = await ws.receive_json()
        assert hello["op"] == 10
        identify = {"token": dc.token, "intents": 0, "properties": {}, "shard": [2, 2]}
        await ws.send_str(json.dumps({"op": 2, "d": identify}))
        closing = await ws.receive()
        assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        assert ws.close_code == 4010
    assert dc.live_session_count == 0
