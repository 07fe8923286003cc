"""The Discord emulator against the real discord.py client: login, messages, limits, buttons, commands."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import discord
import pytest
from discord import app_commands

from tests.emulators.discord import (
    DiscordEmulator,
    GlobalLimitConfig,
    RateLimitConfig,
    UploadedFile,
    point_discord_py_at,
)

CLIENT_TIMEOUT_S = 5.0
NO_PINGS = discord.AllowedMentions.none()


def make_intents(*, message_content: bool, members: bool = False) -> discord.Intents:
    intents = discord.Intents.default()
    intents.message_content = message_content
    intents.members = members
    return intents


@asynccontextmanager
async def running(emulator: DiscordEmulator, client: discord.Client) -> AsyncIterator[discord.Client]:
    """Start a discord.Client against the emulator, wait for on_ready, and close it afterwards."""
    with point_discord_py_at(emulator):
        task = asyncio.create_task(client.start(emulator.token))
        try:
            await asyncio.wait_for(client.wait_until_ready(), CLIENT_TIMEOUT_S)
            yield client
        finally:
            await client.close()
            await asyncio.wait_for(task, CLIENT_TIMEOUT_S)


def new_client(*, message_content: bool = False, members: bool = False) -> discord.Client:
    # guild_ready_timeout: discord.py waits this long after the last GUILD_CREATE before on_ready.
    intents = make_intents(message_content=message_content, members=members)
    return discord.Client(intents=intents, guild_ready_timeout=0.05)


def world(emulator: DiscordEmulator) -> tuple[int, int, int]:
    guild_id = emulator.add_guild("Test guild")
    channel_id = emulator.add_channel(guild_id, "general")
    user_id = emulator.add_user("alice")
    return guild_id, channel_id, user_id


async def test_mention_reply_edit_and_thread(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    guild_id, channel_id, user_id = world(dc)
    client = new_client()
    seen: list[discord.Message] = []

    @client.event
    async def on_message(message: discord.Message) -> None:
        if message.author == client.user:
            return
        seen.append(message)
        if client.user not in message.mentions:
            return
        reply = await message.reply("thinking", allowed_mentions=NO_PINGS)
        await reply.edit(content="done @everyone")
        thread = await message.create_thread(name="answer")
        await thread.send("in the thread", allowed_mentions=NO_PINGS)

    async with running(dc, client):
        assert client.user is not None and client.user.id == dc.bot_user_id
        assert client.get_guild(guild_id) is not None and client.get_channel(channel_id) is not None
        await dc.send_user_message(channel_id, user_id, "no mention here")
        asked = await dc.send_user_message(channel_id, user_id, "what is up?", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread on the question")
        in_thread = await dc.wait_for(lambda: dc.messages(thread.id), what="message in thread")

    # Without the message-content intent, only the mention keeps its text.
    assert [m.content for m in seen] == ["", f"<@{dc.bot_user_id}> what is up?"]
    reply = [m for m in dc.messages(channel_id) if m.author_id == dc.bot_user_id][0]
    assert reply.history == ["thinking", "done @everyone"]
    assert reply.message_reference is not None and reply.message_reference["message_id"] == str(asked)
    assert reply.allowed_mentions is not None and reply.allowed_mentions["parse"] == []
    assert reply.mention_everyone is False
    assert thread.parent_id == channel_id and thread.name == "answer"
    assert [m.content for m in in_thread] == ["in the thread"]


async def test_dm_with_attachment_and_intent(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    guild_id, channel_id, user_id = world(dc)
    client = new_client(message_content=True, members=True)
    got: list[tuple[str, bytes]] = []

    @client.event
    async def on_message(message: discord.Message) -> None:
        if message.author == client.user:
            return
        data = await message.attachments[0].read() if message.attachments else b""
        got.append((message.content, data))
        if isinstance(message.channel, discord.DMChannel):
            await message.channel.send(f"dm answer to {message.content}")

    async with running(dc, client):
        # member_count equals the members sent, so discord.py asks for no chunks.
        guild = client.get_guild(guild_id)
        assert guild is not None and guild.chunked and guild.get_member(user_id) is not None
        await dc.send_user_message(channel_id, user_id, "visible with the intent")
        await dc.send_dm(user_id, "hello in dm", attachments=[UploadedFile(filename="a.txt", data=b"file body")])
        dm_id = dc.dm_channel_id(user_id)
        await dc.wait_for(lambda: len(dc.messages(dm_id)) == 2, what="dm answer")

    assert got == [("visible with the intent", b""), ("hello in dm", b"file body")]
    assert dc.messages(dm_id)[-1].content == "dm answer to hello in dm"


async def test_wrong_token_is_rejected(discord_emulator: DiscordEmulator) -> None:
    client = new_client()
    with point_discord_py_at(discord_emulator):
        with pytest.raises(discord.LoginFailure):
            await client.login("not-the-token")
        await client.close()


async def test_message_limits_answer_50035(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    _, channel_id, _ = world(dc)
    async with running(dc, new_client()) as client:
        channel = client.get_channel(channel_id)
        assert isinstance(channel, discord.TextChannel)
        with pytest.raises(discord.HTTPException) as too_long:
            await channel.send("x" * 2001)
        with pytest.raises(discord.HTTPException) as big_embed:
            await channel.send(embed=discord.Embed(description="y" * 4097))
        view = discord.ui.View()
        view.add_item(discord.ui.Button(label="b", custom_id="z" * 101))
        with pytest.raises(discord.HTTPException) as long_id:
            await channel.send("buttons", view=view)
        await channel.send("x" * 2000)

    for error in (too_long, big_embed, long_id):
        assert error.value.status == 400 and error.value.code == 50035
    assert [len(m.content) for m in dc.messages(channel_id)] == [2000]


async def test_rate_limited_edits_all_land() -> None:
    async with DiscordEmulator(time_scale=0.05, rate_limit=RateLimitConfig(limit=2, window_s=2.0)) as dc:
        _, channel_id, _ = world(dc)
        async with running(dc, new_client()) as client:
            channel = client.get_channel(channel_id)
            assert isinstance(channel, discord.TextChannel)
            message = await channel.send("v0")
            await asyncio.gather(*(message.edit(content=f"v{i}") for i in range(1, 9)))
            # discord.py keeps creates and edits in separate buckets; the emulator counts them
            # together, so mixing them draws 429s that discord.py must retry.
            extra = await asyncio.gather(*(channel.send(f"n{i}") for i in range(4)))
            await asyncio.gather(*(m.edit(content=f"{m.content}!") for m in extra), message.edit(content="last"))
        stored = dc.messages(channel_id)[0]
        assert stored.edit_count == 9 and stored.content == "last"
        assert sorted(stored.history[:-1]) == sorted(f"v{i}" for i in range(9))
        assert [m.content for m in dc.messages(channel_id)[1:]] == [f"n{i}!" for i in range(4)]
        edits = [r for r in dc.request_log if r.method == "PATCH"]
        assert [r.status for r in edits if r.status != 429] == [200] * 13


async def test_raw_rate_limit_headers_and_429(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    _, channel_id, _ = world(dc)
    url = f"{dc.api_base}/channels/{channel_id}/messages"
    headers = {"Authorization": f"Bot {dc.token}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        statuses: list[int] = []
        for i in range(3):
            async with http.post(url, json={"content": f"m{i}"}) as response:
                statuses.append(response.status)
                created = await response.json()
                assert response.headers["Content-Type"] == "application/json"
                assert response.headers["X-RateLimit-Remaining"] == str(4 - i)
                assert response.headers["X-RateLimit-Limit"] == "5"
                assert float(response.headers["X-RateLimit-Reset-After"]) > 0
                assert response.headers["X-RateLimit-Bucket"]
        edit_url = f"{url}/{created['id']}"
        for i in range(2):
            async with http.patch(edit_url, json={"content": f"e{i}"}) as response:
                statuses.append(response.status)
        # Creates and edits share the channel's bucket: the sixth request is refused.
        async with http.patch(edit_url, json={"content": "too many"}) as response:
            assert response.status == 429
            assert response.headers["Via"] and float(response.headers["Retry-After"]) >= 0
            body = await response.json()
            assert body["message"] == "You are being rate limited." and body["global"] is False
            assert body["retry_after"] > 0
        async with http.get(edit_url, headers={"Authorization": "Bot wrong"}) as response:
            assert response.status == 401
    assert statuses == [200] * 5
    assert dc.count_429 == 1
    assert dc.message(int(created["id"])).content == "e1"


class ApproveButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=r"approve:(?P<call_id>[0-9]+)"):
    def __init__(self, call_id: int) -> None:
        super().__init__(discord.ui.Button(label="Approve", custom_id=f"approve:{call_id}"))
        self.call_id = call_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str], /
    ) -> ApproveButton:
        return cls(int(match["call_id"]))

    async def callback(self, interaction: discord.Interaction) -> None:
        await interaction.response.send_message(f"approved {self.call_id} by {interaction.user.id}", ephemeral=True)


class DynamicClient(discord.Client):
    async def setup_hook(self) -> None:
        self.add_dynamic_items(ApproveButton)


async def test_dynamic_button_click_gets_ephemeral_answer(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    _, channel_id, user_id = world(dc)
    client = DynamicClient(intents=make_intents(message_content=False), guild_ready_timeout=0.05)
    async with running(dc, client):
        channel = client.get_channel(channel_id)
        assert isinstance(channel, discord.TextChannel)
        view = discord.ui.View(timeout=None)
        view.add_item(ApproveButton(42))
        posted = await channel.send("approve?", view=view)
        interaction_id = await dc.click_button(posted.id, "approve:42", user_id)
        responses = await dc.wait_for(lambda: dc.interaction_responses(interaction_id), what="click answer")
        with pytest.raises(ValueError):
            await dc.click_button(posted.id, "approve:43", user_id)

    assert len(responses) == 1
    assert responses[0].kind == "callback" and responses[0].callback_type == 4
    assert responses[0].ephemeral and responses[0].content == f"approved 42 by {user_id}"
    assert [m.content for m in dc.messages(channel_id)] == ["approve?"]


class CommandClient(discord.Client):
    def __init__(self, guild_id: int) -> None:
        super().__init__(intents=make_intents(message_content=False), guild_ready_timeout=0.05)
        self.tree = app_commands.CommandTree(self)
        self.guild_id = guild_id

        @self.tree.command(name="ask", description="Ask the bot")
        async def ask(interaction: discord.Interaction, question: str) -> None:
            await interaction.response.defer(thinking=True)
            await interaction.edit_original_response(content=f"answer to {question}")

    async def setup_hook(self) -> None:
        await self.tree.sync()


async def test_slash_command_syncs_defers_and_edits(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    guild_id, channel_id, user_id = world(dc)
    async with running(dc, CommandClient(guild_id)):
        assert [c["name"] for c in dc.commands()] == ["ask"]
        assert dc.commands()[0]["options"][0]["name"] == "question"
        interaction_id = await dc.invoke_slash("ask", {"question": "why?"}, user_id, channel_id)
        await dc.wait_for(lambda: len(dc.interaction_responses(interaction_id)) == 2, what="defer and edit")

    callback, edit = dc.interaction_responses(interaction_id)
    assert callback.kind == "callback" and callback.callback_type == 5
    assert edit.kind == "edit_original" and edit.content == "answer to why?"
    [answer] = dc.messages(channel_id)
    assert answer.content == "answer to why?" and answer.flags == 0
    assert answer.history == ["", "answer to why?"]


async def test_client_resumes_after_dropped_gateway(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    _, channel_id, user_id = world(dc)
    client = new_client()
    resumed = asyncio.Event()
    seen: list[str] = []

    @client.event
    async def on_resumed() -> None:
        resumed.set()

    @client.event
    async def on_message(message: discord.Message) -> None:
        seen.append(message.content)

    async with running(dc, client):
        await dc.drop_gateway_connections()
        await asyncio.wait_for(resumed.wait(), CLIENT_TIMEOUT_S)
        await dc.send_user_message(channel_id, user_id, "after resume", mentions_bot=True)
        await dc.wait_for(lambda: seen, what="message after resume")

    assert seen == [f"<@{dc.bot_user_id}> after resume"]


class DecideButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=r"decide:(?P<call_id>[0-9]+)"):
    def __init__(self, call_id: int, *, disabled: bool = False) -> None:
        super().__init__(discord.ui.Button(label="Decide", custom_id=f"decide:{call_id}", disabled=disabled))
        self.call_id = call_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str], /
    ) -> DecideButton:
        return cls(int(match["call_id"]))

    async def callback(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer()
        view = discord.ui.View(timeout=None)
        view.add_item(DecideButton(self.call_id, disabled=True))
        await interaction.edit_original_response(content="Approved", view=view)
        await interaction.followup.send("done", ephemeral=True)


class DecideClient(discord.Client):
    async def setup_hook(self) -> None:
        self.add_dynamic_items(DecideButton)


async def test_deferred_update_edits_clicked_message_and_followup_is_ephemeral(
    discord_emulator: DiscordEmulator,
) -> None:
    dc = discord_emulator
    _, channel_id, user_id = world(dc)
    client = DecideClient(intents=make_intents(message_content=False), guild_ready_timeout=0.05)
    async with running(dc, client):
        channel = client.get_channel(channel_id)
        assert isinstance(channel, discord.TextChannel)
        view = discord.ui.View(timeout=None)
        view.add_item(DecideButton(7))
        posted = await channel.send("approve?", view=view)
        interaction_id = await dc.click_button(posted.id, "decide:7", user_id)
        await dc.wait_for(lambda: len(dc.interaction_responses(interaction_id)) == 3, what="three responses")
        with pytest.raises(ValueError):
            await dc.click_button(posted.id, "decide:7", user_id)

    callback, edit, followup = dc.interaction_responses(interaction_id)
    assert (callback.kind, callback.callback_type) == ("callback", 6)
    assert edit.kind == "edit_original" and edit.message_id == posted.id
    assert followup.kind == "followup" and followup.ephemeral and followup.content == "done"
    clicked = dc.message(posted.id)
    assert clicked.history == ["approve?", "Approved"]
    assert clicked.components[0]["components"][0]["disabled"] is True
    assert [m.content for m in dc.messages(channel_id)] == ["Approved"]
    assert [m.content for m in dc.messages(channel_id, include_ephemeral=True)] == ["Approved", "done"]


async def test_global_limit_answers_429_global_across_routes() -> None:
    async with DiscordEmulator(rate_limit=None, global_limit=GlobalLimitConfig(limit=4, window_s=30.0)) as dc:
        _, channel_id, _ = world(dc)
        headers = {"Authorization": f"Bot {dc.token}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            statuses = []
            # Different routes, different per-route buckets: only the global limit can refuse these.
            for url in (f"{dc.api_base}/users/@me", f"{dc.api_base}/channels/{channel_id}", f"{dc.api_base}/gateway") * 2:
                async with http.get(url) as response:
                    statuses.append(response.status)
                    if response.status == 429:
                        refused_headers, body = response.headers, await response.json()
        assert statuses == [200] * 4 + [429] * 2
        assert refused_headers["X-RateLimit-Global"] == "true" and refused_headers["X-RateLimit-Scope"] == "global"
        assert float(refused_headers["Retry-After"]) > 0 and "X-RateLimit-Bucket" not in refused_headers
        assert body["global"] is True and 0 < body["retry_after"] <= 30 and body["message"] == "You are being rate limited."
        assert dc.count_global_429 >= 2


async def test_discord_py_waits_out_a_global_429_and_interactions_pass_it() -> None:
    async with DiscordEmulator(
        time_scale=0.05, rate_limit=None, global_limit=GlobalLimitConfig(limit=3, window_s=10.0)
    ) as dc:
        _, channel_id, user_id = world(dc)
        dc.set_global_limit(None)  # login and the gateway first
        client = DynamicClient(intents=make_intents(message_content=False), guild_ready_timeout=0.05)
        async with running(dc, client):
            channel = client.get_channel(channel_id)
            assert isinstance(channel, discord.TextChannel)
            view = discord.ui.View(timeout=None)
            view.add_item(ApproveButton(7))
            posted = await channel.send("approve?", view=view)
            dc.set_global_limit(GlobalLimitConfig(limit=3, window_s=10.0))
            sent = await asyncio.gather(*(channel.send(f"m{i}", allowed_mentions=NO_PINGS) for i in range(6)))
            # The window is spent, yet a click is answered: interaction callbacks are exempt.
            clicked = await dc.click_button(posted.id, "approve:7", user_id)
            await dc.wait_for(lambda: dc.interaction_responses(clicked), what="click answered")
        assert sorted(m.content for m in sent) == [f"m{i}" for i in range(6)]
        assert dc.count_global_429 > 0
        assert dc.interaction_responses(clicked)[0].callback_type == 4


async def test_member_route_knows_who_is_in_which_guild(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    alice, mallory = dc.add_user("alice"), dc.add_user("mallory")
    listed = dc.add_guild("Listed", members=[alice])
    everyone = dc.add_guild("Everyone")
    headers = {"Authorization": f"Bot {dc.token}"}

    async def member(guild_id: int, user_id: int) -> tuple[int, dict[str, Any]]:
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(f"{dc.api_base}/guilds/{guild_id}/members/{user_id}") as response:
                return response.status, await response.json()

    status, body = await member(listed, alice)
    assert status == 200 and body["user"]["id"] == str(alice)
    assert await member(listed, mallory) == (404, {"code": 10007, "message": "Unknown Member"})
    assert (await member(everyone, mallory))[0] == 200
    assert await member(12345, alice) == (404, {"code": 10004, "message": "Unknown Guild"})
    dc.remove_member(everyone, mallory)
    assert (await member(everyone, mallory))[0] == 404 and (await member(everyone, alice))[0] == 200
    dc.add_member(listed, mallory)
    assert (await member(listed, mallory))[0] == 200
    assert [r.status for r in dc.requests_to("member_get")] == [200, 404, 200, 404, 404, 200, 200]


async def test_threads_refused_where_the_bot_may_not_open_them_and_history_around(
    discord_emulator: DiscordEmulator,
) -> None:
    dc = discord_emulator
    guild_id, _, user_id = world(dc)
    closed = dc.add_channel(guild_id, "no-threads", threads_allowed=False)
    async with running(dc, new_client()) as client:
        channel = client.get_channel(closed)
        assert isinstance(channel, discord.TextChannel)
        messages = [await channel.send(f"m{i}") for i in range(9)]
        with pytest.raises(discord.Forbidden) as refused:
            await messages[0].create_thread(name="nope")
        around = [m.content async for m in channel.history(limit=4, around=messages[4])]
    assert refused.value.code == 50013
    assert around == ["m6", "m5", "m4", "m3"]
    assert not dc.threads


async def test_any_custom_id_can_be_clicked_and_an_interaction_replayed(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    _, channel_id, user_id = world(dc)
    client = DynamicClient(intents=make_intents(message_content=False), guild_ready_timeout=0.05)
    async with running(dc, client):
        channel = client.get_channel(channel_id)
        assert isinstance(channel, discord.TextChannel)
        view = discord.ui.View(timeout=None)
        view.add_item(ApproveButton(7))
        posted = await channel.send("approve?", view=view)
        # click_button refuses a custom_id the message does not show; a forged request sends it anyway
        # (and discord.py ignores it).
        forged = await dc.click_custom_id(channel_id, "approve:8", user_id, message_id=posted.id)
        clicked = await dc.click_custom_id(channel_id, "approve:7", user_id, message_id=posted.id)
        responses = await dc.wait_for(lambda: dc.interaction_responses(clicked), what="click answer")
        await dc.replay_interaction(clicked)
        await asyncio.sleep(0.3)
    assert dc.interaction_responses(forged) == []
    # The replay's answer is refused (already acknowledged): still one response.
    assert len(responses) == 1 and dc.interaction_responses(clicked) == responses
    assert responses[0].content == f"approved 7 by {user_id}"
    assert [record.status for record in dc.requests_to("interaction_callback")] == [200, 400]


async def test_dispatch_raw_sends_a_payload_as_given(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    _, channel_id, user_id = world(dc)
    client = new_client()
    received: list[int] = []

    @client.event
    async def on_message(message: discord.Message) -> None:
        received.append(message.id)

    async with running(dc, client):
        asked = await dc.send_user_message(channel_id, user_id, "hello", mentions_bot=True)
        from tests.emulators.discord.payloads import message_payload

        await dc.dispatch_raw("MESSAGE_CREATE", message_payload(dc.world, dc.message(asked), for_gateway=True))
        await dc.wait_for(lambda: len(received) == 2, what="both dispatches")
    assert received == [asked, asked]


class ReasonModal(discord.ui.Modal, title="Why?"):
    reason: discord.ui.TextInput[Any] = discord.ui.TextInput(label="Reason", custom_id="reason", required=False)

    async def on_submit(self, interaction: discord.Interaction) -> None:
        await interaction.response.send_message(f"noted: {self.reason.value}", ephemeral=True)


class ModalButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=r"why:(?P<late>[01])"):
    def __init__(self, late: bool) -> None:
        super().__init__(discord.ui.Button(label="Why", custom_id=f"why:{int(late)}"))
        self.late = late

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str], /
    ) -> ModalButton:
        return cls(match["late"] == "1")

    async def callback(self, interaction: discord.Interaction) -> None:
        if self.late:
            await interaction.response.defer()
            try:
                await interaction.response.send_modal(ReasonModal())
            except discord.InteractionResponded:
                # discord.py refuses locally; the raw route must refuse too (below).
                pass
            return
        await interaction.response.send_modal(ReasonModal())


class ModalClient(discord.Client):
    async def setup_hook(self) -> None:
        self.add_dynamic_items(ModalButton)


async def test_a_modal_is_a_first_response_and_its_submission_a_modal_submit(discord_emulator: DiscordEmulator) -> None:
    dc = discord_emulator
    _, channel_id, user_id = world(dc)
    client = ModalClient(intents=make_intents(message_content=False), guild_ready_timeout=0.05)
    async with running(dc, client):
        channel = client.get_channel(channel_id)
        assert isinstance(channel, discord.TextChannel)
        view = discord.ui.View(timeout=None)
        view.add_item(ModalButton(False))
        view.add_item(ModalButton(True))
        posted = await channel.send("why?", view=view)

        clicked = await dc.click_button(posted.id, "why:0", user_id)
        modal = await dc.wait_for(lambda: dc.interaction(clicked).modal, what="modal")
        [callback] = dc.interaction_responses(clicked)
        assert callback.callback_type == 9 and modal["title"] == "Why?"
        with pytest.raises(ValueError):
            await dc.submit_modal(clicked, {"nothing": "x"})
        submitted = await dc.submit_modal(clicked, {"reason": "too vague"})
        responses = await dc.wait_for(lambda: dc.interaction_responses(submitted), what="submission answer")
        assert dc.interaction(submitted).type == 5 and responses[0].content == "noted: too vague"
        with pytest.raises(ValueError):
            await dc.submit_modal(clicked, {"reason": "twice"})  # a modal is submitted once

        late = await dc.click_button(posted.id, "why:1", user_id)
        await dc.wait_for(lambda: dc.interaction_responses(late), what="defer")
        assert dc.interaction(late).modal is None
        # After a defer, a modal is refused by Discord: the interaction is already acknowledged.
        interaction = dc.interaction(late)
        async with aiohttp.ClientSession() as http:
            url = f"{dc.api_base}/interactions/{interaction.id}/{interaction.token}/callback"
            body = {"type": 9, "data": ReasonModal().to_dict()}
            async with http.post(url, json=body) as response:
                assert response.status == 400
            # A modal's own submission cannot answer with another modal, and a bad modal is refused.
            submit = dc.interaction(submitted)
            async with http.post(f"{dc.api_base}/interactions/{submit.id}/{submit.token}/callback", json=body) as response:
                assert response.status == 400
        fresh = await dc.click_custom_id(channel_id, "unknown:1", user_id)
        interaction = dc.interaction(fresh)
        async with aiohttp.ClientSession() as http:
            url = f"{dc.api_base}/interactions/{interaction.id}/{interaction.token}/callback"
            too_long = {"type": 9, "data": {**ReasonModal().to_dict(), "title": "x" * 46}}
            async with http.post(url, json=too_long) as response:
                assert response.status == 400
