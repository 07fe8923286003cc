"""Discord's readers' facts against the emulator: @everyone's view makes a channel public (a thread: its parent's),
a member's roles and the channels' overwrites say what they may read, a member is read once per cache period
(through the door), and forgetting reads them again."""

from __future__ import annotations

from adapters.discord.channel_facts import DiscordChannelFacts
from core.store.db import Database
from tests.adapters.discord.test_channel_history import VIEW_CHANNEL, learning_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def private_world(dc: DiscordEmulator) -> tuple[int, int, int, int, int, int]:
    """A guild whose #ops only the ops role (and the bot) may view; ana has the role, bob not."""
    owner = dc.add_user("owner")
    guild = dc.add_guild("g", owner_id=owner)
    ops = dc.add_role(guild, "ops")
    ana, bob = dc.add_user("ana", roles=[ops]), dc.add_user("bob")
    public, private = dc.add_channel(guild, "general"), dc.add_channel(guild, "ops")
    dc.world.channels[private].overwrites = [
        {"id": str(guild), "type": 0, "allow": "0", "deny": str(VIEW_CHANNEL)},
        {"id": str(ops), "type": 0, "allow": str(VIEW_CHANNEL), "deny": "0"},
        {"id": str(dc.bot_user_id), "type": 1, "allow": str(VIEW_CHANNEL), "deny": "0"},
    ]
    return guild, ops, ana, bob, public, private


async def test_public_means_everyone_views_it_and_a_thread_is_its_parents(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    guild, _, ana, _, public, private = private_world(dc)
    root = await dc.send_user_message(private, ana, "started here")
    async with learning_bot(dc, db, openai_emulator) as adapter:
        thread = await dc.start_thread(root, "in ops", by=ana)
        await dc.wait_for(lambda: adapter.client.get_guild(guild).get_thread(thread), what="the thread cached")  # type: ignore[union-attr]
        facts = adapter.channel_facts
        assert (await facts.place(str(guild), str(public))).public
        assert not (await facts.place(str(guild), str(private))).public
        assert not (await facts.place(str(guild), str(thread))).public
        dm = await facts.place("@dm", "1")
        assert dm.direct and not dm.public

        async def opened() -> bool:
            return (await facts.place(str(guild), str(private))).public

        await dc.set_overwrite(private, guild, allow=VIEW_CHANNEL)
        assert await dc.wait_for(opened, what="the overwrite heard")  # the gateway's cache, current: no forget needed


async def test_a_member_reads_the_channels_their_roles_and_overwrites_let_them_read_asked_once_per_cache_period(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    guild, ops, ana, bob, public, private = private_world(dc)
    stranger = dc.add_user("stranger")
    dc.world.guilds[guild].member_ids = {ana, bob}
    async with learning_bot(dc, db, openai_emulator) as adapter:
        clock = Clock()
        facts = DiscordChannelFacts(client=lambda: adapter.client, door=adapter.channel_facts._door, cache_s=300.0,
                                    clock=clock)
        both = [str(public), str(private)]
        assert await facts.readable_by(str(guild), str(ana), both) == frozenset(both)
        assert await facts.readable_by(str(guild), str(bob), both) == {str(public)}
        assert await facts.readable_by(str(guild), str(stranger), both) == frozenset()
        asked = len(dc.requests_to("member_get"))
        assert asked == 3
        dc.world.users[ana].role_ids.remove(ops)  # without the Server Members intent nobody tells the bot
        assert await facts.readable_by(str(guild), str(ana), both) == frozenset(both)
        assert len(dc.requests_to("member_get")) == asked  # believed for the cache period
        clock.now = 301.0
        assert await facts.readable_by(str(guild), str(ana), both) == {str(public)}
        dc.world.users[bob].role_ids.append(ops)
        facts.forget(str(guild), user=str(bob))
        assert await facts.readable_by(str(guild), str(bob), both) == frozenset(both)

        async def bob_shut_out() -> bool:
            return await facts.readable_by(str(guild), str(bob), both) == {str(public)}

        asked = len(dc.requests_to("member_get"))
        await dc.set_overwrite(private, bob, deny=VIEW_CHANNEL, member=True)
        # Channels are the gateway's, current: bob's cached member meets the new overwrite with no read of him.
        assert await dc.wait_for(bob_shut_out, what="the overwrite heard")
        assert len(dc.requests_to("member_get")) == asked
