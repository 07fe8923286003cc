"""The Discord emulator's message commands, ephemeral followups, token expiry and channels the bot cannot read,
against the real discord.py client."""

from __future__ import annotations

import asyncio

import discord
import pytest
from discord import app_commands

from tests.emulators.discord import DiscordEmulator
from tests.emulators.test_discord_emulator import new_client, running, world


async def test_a_message_command_carries_its_target_and_answers_ephemerally_to_the_invoker_only(
    discord_emulator: DiscordEmulator,
) -> None:
    dc = discord_emulator
    _, channel_id, alice = world(dc)
    bob = dc.add_user("bob")
    seen: list[tuple[int, str, bool]] = []
    client = new_client()
    tree = app_commands.CommandTree(client)

    @tree.context_menu(name="Ask relaybot about this")
    async def ask_about(interaction: discord.Interaction, message: discord.Message) -> None:
        seen.append((message.id, message.content, interaction.app_permissions.read_message_history))
        await interaction.response.defer(ephemeral=True, thinking=True)
        first = await interaction.edit_original_response(content="part one")
        extra = await interaction.followup.send("part two", ephemeral=True, wait=True)
        await interaction.followup.edit_message(extra.id, content="part two, edited")
        assert first.flags.ephemeral and extra.flags.ephemeral

    async with running(dc, client):
        await tree.sync()
        assert [(c["name"], c["type"]) for c in dc.commands()] == [("Ask relaybot about this", 3)]
        target = await dc.send_user_message(channel_id, bob, "the build is red")
        interaction_id = await dc.invoke_message_command("Ask relaybot about this", target, alice)
        await dc.wait_for(lambda: len(dc.interaction_responses(interaction_id)) == 4, what="four responses")
        with pytest.raises(ValueError):
            await dc.invoke_message_command("No such command", target, alice)
    # Without the Message Content intent the target still comes with its text (an interaction's own message).
    assert seen == [(target, "the build is red", True)]
    assert [r.kind for r in dc.interaction_responses(interaction_id)] == ["callback", "edit_original", "followup", "edit_followup"]
    assert all(r.ephemeral for r in dc.interaction_responses(interaction_id))
    assert [m.content for m in dc.messages_seen_by(channel_id, alice)] == ["the build is red", "part one", "part two, edited"]
    assert [m.content for m in dc.messages_seen_by(channel_id, bob)] == ["the build is red"]
    assert [m.content for m in dc.messages(channel_id)] == ["the build is red"]


async def test_past_the_token_lifetime_followups_and_edits_answer_401_and_a_dismissed_message_404(
    discord_emulator: DiscordEmulator,
) -> None:
    dc = discord_emulator
    _, channel_id, alice = world(dc)
    outcomes: list[int] = []
    done = asyncio.Event()
    client = new_client()
    tree = app_commands.CommandTree(client)

    @tree.command(name="ask", description="ask")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        shown = await interaction.edit_original_response(content="first")
        if question == "dismiss":
            dc.dismiss_ephemeral(shown.id)
        else:
            dc.set_interaction_token_lifetime(0.0)
        for call in (
            lambda: interaction.edit_original_response(content="again"),
            lambda: interaction.followup.send("more", ephemeral=True, wait=True),
        ):
            try:
                await call()
                outcomes.append(200)
            except discord.HTTPException as exc:
                outcomes.append(exc.status)
        done.set()

    async with running(dc, client):
        await tree.sync()
        await dc.invoke_slash("ask", {"question": "expire"}, alice, channel_id)
        await asyncio.wait_for(done.wait(), 5)
        assert outcomes == [401, 401]
        dc.set_interaction_token_lifetime(None)
        done.clear()
        outcomes.clear()
        await dc.invoke_slash("ask", {"question": "dismiss"}, alice, channel_id)
        await asyncio.wait_for(done.wait(), 5)
        # The dismissed response is gone; the token still makes new followups.
        assert outcomes == [404, 200]


async def test_a_channel_hidden_from_the_bot_refuses_its_reads_and_says_so_in_interactions(
    discord_emulator: DiscordEmulator,
) -> None:
    dc = discord_emulator
    _, channel_id, alice = world(dc)
    permissions: list[discord.Permissions] = []
    heard: list[str] = []
    client = new_client(message_content=True)
    tree = app_commands.CommandTree(client)

    @tree.context_menu(name="Summarise this thread")
    async def summarise(interaction: discord.Interaction, message: discord.Message) -> None:
        permissions.append(interaction.app_permissions)
        await interaction.response.send_message("cannot read it", ephemeral=True)

    @client.event
    async def on_message(message: discord.Message) -> None:
        heard.append(message.content)

    async with running(dc, client):
        await tree.sync()
        target = await dc.send_user_message(channel_id, alice, "before hiding")
        await dc.wait_for(lambda: heard == ["before hiding"], what="the message heard")
        dc.hide_channel_from_bot(channel_id)
        await dc.send_user_message(channel_id, alice, "after hiding")
        channel = client.get_partial_messageable(channel_id)
        with pytest.raises(discord.Forbidden) as refused:
            [m async for m in channel.history(limit=10)]
        with pytest.raises(discord.Forbidden):
            await channel.send("hello")
        interaction_id = await dc.invoke_message_command("Summarise this thread", target, alice)
        await dc.wait_for(lambda: dc.interaction_responses(interaction_id), what="the private answer")
    assert refused.value.code == 50001
    assert heard == ["before hiding"]
    [seen] = permissions
    assert not seen.read_message_history and not seen.view_channel and seen.send_messages
    assert dc.interaction_responses(interaction_id)[0].ephemeral


async def test_a_message_a_thread_was_started_on_is_flagged_has_thread(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    _, channel_id, alice = world(dc)
    client = new_client(message_content=True)
    async with running(dc, client):
        plain = await dc.send_user_message(channel_id, alice, "no thread here")
        opening = await dc.send_user_message(channel_id, alice, "a thread starts here")
        await dc.start_thread(opening, "the thread", by=alice)
        channel = client.get_partial_messageable(channel_id)
        flagged = {message.id: message.flags.has_thread async for message in channel.history(limit=10)}
    assert flagged == {plain: False, opening: True}
