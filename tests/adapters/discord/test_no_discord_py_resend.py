"""discord.py re-sends any request answered 500/502/504/524 itself, up to five times, sleeping 1 + 2·tries real
seconds between (discord/http.py): an edit or a read answered so must come out at once as OutcomeUnknown, to be
retried by our own paced, capped backoff (an edit is idempotent: sent again, it shows the same text)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import discord
import pytest

from adapters.discord.transport import ChannelTransport, guarded
from adapters.discord.transport_http import OutcomeUnknown
from adapters.streaming import TransientSendError
from core.store.db import Database
from tests.adapters.discord.harness import bot_messages, make_world, running_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator

pytestmark = pytest.mark.timeout(60)


async def edited(message: discord.Message) -> Any:
    return await message.edit(content="edited")


async def read(message: discord.Message) -> Any:
    return await message.channel.fetch_message(message.id)


@pytest.mark.parametrize("status", [500, 502, 504, 524])
@pytest.mark.parametrize(("route", "call"), [("message_edit", edited), ("message_get", read)])
async def test_an_edit_or_a_read_answered_5xx_is_not_sent_again_by_discord_py(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, status: int, route: str,
    call: Callable[[discord.Message], Awaitable[Any]],
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        message = await guarded(adapter.client.get_partial_messageable(w.channel_id).send("first"))
        dc.fail_after_work(route, status=status)
        with pytest.raises(OutcomeUnknown):
            await guarded(call(message))
    assert len(dc.requests_to(route)) == 1, "sent once: the retry is ours, paced and capped"


async def test_an_edit_whose_reply_was_a_500_is_sent_again_by_us_and_shows_its_text_once(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        transport = ChannelTransport(adapter.client.get_partial_messageable(w.channel_id))
        message_id = await transport.post("part one ▌", key="answer-5xx:0")
        dc.fail_after_work("message_edit", status=500)
        with pytest.raises(TransientSendError):
            await transport.edit(message_id, "part one, whole")
        await transport.edit(message_id, "part one, whole")
    assert [m.content for m in bot_messages(dc, w.channel_id)] == ["part one, whole"]
    assert len(dc.requests_to("message_edit")) == 2


@pytest.mark.parametrize("route", ["message_create", "message_get"])
async def test_a_5xx_not_sent_again_is_still_the_error_discord_py_raises_for_it(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, route: str
) -> None:
    """A call made without `guarded` (an attachment read, the command sync) catches discord.HTTPException: a 5xx
    must still come out as one, as it did after discord.py's own tries, not as an aiohttp error it lets through."""
    dc = discord_emulator
    w = make_world(dc)
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        channel = adapter.client.get_partial_messageable(w.channel_id)
        message = await channel.send("first")
        dc.fail_after_work(route, status=502)
        with pytest.raises(discord.DiscordServerError) as raised:
            await (channel.send("second") if route == "message_create" else channel.fetch_message(message.id))
    assert raised.value.status == 502
    assert len(dc.requests_to(route)) == (2 if route == "message_create" else 1)


async def test_a_login_answered_5xx_at_start_is_tried_again_and_the_bot_starts(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """discord.py used to re-send the start's login on a 5xx; now that it sends nothing twice, our login does."""
    from adapters.discord import transport_calls

    monkeypatch.setattr(transport_calls.login, "__kwdefaults__", {"retry_s": (0.01, 0.01, 0.01)})
    dc = discord_emulator
    w = make_world(dc)
    dc.fail_after_work("get_me", status=502, times=2)
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        await guarded(adapter.client.get_partial_messageable(w.channel_id).send("started"))
    assert len(dc.requests_to("get_me")) >= 3
    assert [m.content for m in bot_messages(dc, w.channel_id)] == ["started"]
