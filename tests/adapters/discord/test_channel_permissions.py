"""Discord's permission rule over REST JSON (what `info` decides privacy and the bot's access with) agrees with
discord.py's own `permissions_for` on the gateway's cache, and with the emulator's rule, over random roles and
overwrites (a fixed seed, bounded)."""

from __future__ import annotations

import random

from adapters.discord.channel_permissions import READ_MESSAGE_HISTORY, VIEW_CHANNEL, channel_permissions
from tests.emulators.discord import DiscordEmulator
from tests.emulators.test_discord_emulator import new_client, running
from tests.emulators.test_discord_learning import rest

BITS = (VIEW_CHANNEL, READ_MESSAGE_HISTORY, 1 << 3)  # View Channel, Read Message History, Administrator (rarely)


def some_bits(rng: random.Random) -> int:
    chosen = 0
    for bit in BITS:
        if rng.random() < (0.05 if bit == 1 << 3 else 0.5):
            chosen |= bit
    return chosen


async def test_the_json_rule_agrees_with_discord_py_and_the_emulator_over_random_overwrites() -> None:
    rng = random.Random(24)
    async with DiscordEmulator() as dc:
        owner = dc.add_user("owner")
        guild = dc.add_guild("g", owner_id=owner)
        dc.world.roles[guild].permissions = some_bits(rng)
        roles = [dc.add_role(guild, f"r{i}", permissions=some_bits(rng)) for i in range(4)]
        dc.grant_role(dc.bot_user_id, dc.add_role(guild, "relaybot", permissions=1 << 3))  # it reads every channel
        users = [owner] + [dc.add_user(f"u{i}", roles=rng.sample(roles, rng.randint(0, 3))) for i in range(8)]
        channels = [dc.add_channel(guild, f"c{i}") for i in range(8)]
        for channel in channels:
            targets = [(0, guild), *((0, r) for r in roles), *((1, u) for u in users)]
            dc.world.channels[channel].overwrites = [
                {"id": str(target), "type": kind, "allow": str(some_bits(rng)), "deny": str(some_bits(rng))}
                for kind, target in rng.sample(targets, rng.randint(0, 4))]
        async with running(dc, new_client(members=True)) as client, rest(dc) as http:
            cached = client.get_guild(guild)
            assert cached is not None
            guild_json = await http.get_guild(guild)
            compared = 0
            for channel in channels:
                channel_json = await http.get_channel(channel)
                where = cached.get_channel(channel)
                assert where is not None
                everyone = channel_permissions(guild_json, channel_json)
                assert bool(everyone & VIEW_CHANNEL) == where.permissions_for(cached.default_role).view_channel
                for user in users:
                    member = cached.get_member(user)
                    assert member is not None
                    ours = channel_permissions(guild_json, channel_json, user_id=str(user),
                                               role_ids=[str(r) for r in dc.world.member_role_ids(guild, user)])
                    theirs = where.permissions_for(member)
                    emulated = dc.world.channel_permissions(guild, channel, user)
                    for bit, name in ((VIEW_CHANNEL, "view_channel"), (READ_MESSAGE_HISTORY, "read_message_history")):
                        assert bool(ours & bit) == getattr(theirs, name) == bool(emulated & bit), (channel, user, name)
                    compared += 1
    assert compared == len(channels) * len(users)
