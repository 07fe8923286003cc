"""The Discord gateway and REST client keep working after what used to stop them for good: a malformed
gateway event, a call cancelled while discord.py sleeps out a global 429."""

from __future__ import annotations

import asyncio

from adapters.discord.transport import guarded
from core.store.db import Database
from tests.adapters.discord.harness import make_world, running_bot, wait_for_text
from tests.emulators.discord import DiscordEmulator
from tests.emulators.discord.models import GlobalLimitConfig
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.observe import sample

# Longer than the bot could ever need here: reaching it means a call hangs.
HANG_S = 10.0


async def test_a_malformed_gateway_event_is_dropped_and_the_bot_keeps_answering(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("still here"))
    before = sample("relaybot_malformed_events_total", platform="discord")
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        # A MESSAGE_UPDATE without channel_id or author: discord.py's parser raises on it.
        await dc.dispatch_raw("MESSAGE_UPDATE", {"id": "1"})
        await dc.dispatch_raw("MESSAGE_CREATE", {"id": "2", "content": "half a message"})
        asked = await dc.send_user_message(w.channel_id, w.alice, "are you there?", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        await wait_for_text(dc, thread.id, "still here")
        assert await adapter.readiness() is None
    assert sample("relaybot_malformed_events_total", platform="discord") >= before + 1


async def test_a_call_cancelled_during_a_global_rate_limit_does_not_block_later_calls(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        channel = adapter.client.get_partial_messageable(w.channel_id)
        # One request a long window: the second waits in discord.py's global sleep.
        dc.set_global_limit(GlobalLimitConfig(limit=1, window_s=60.0))
        await guarded(channel.send("uses the window"))
        waiting = asyncio.create_task(guarded(channel.send("cancelled while waiting")))
        await dc.wait_for(lambda: dc.count_global_429 >= 1 or None, HANG_S, what="a global 429")
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        dc.set_global_limit(None)
        sent = await asyncio.wait_for(guarded(channel.send("after the cancel")), HANG_S)
    assert sent.content == "after the cancel"



async def test_a_gateway_task_that_ended_makes_the_process_unready_until_maintain_connects_again(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("back again"))
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        gateway = adapter._connection
        assert gateway is not None
        gateway.cancel()
        await asyncio.gather(gateway, return_exceptions=True)
        assert await adapter.readiness() == "the gateway task was cancelled"
        await adapter.maintain()
        await dc.wait_for(lambda: dc.live_session_count >= 1 or None, HANG_S, what="a new gateway session")
        asked = await dc.send_user_message(w.channel_id, w.alice, "still listening?", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        await wait_for_text(dc, thread.id, "back again")
        # The socket the ended task left is closed (and its keep-alive thread with it), not left beating beside.
        assert dc.live_session_count == 1
