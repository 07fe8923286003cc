"""Discord readiness (READY seen, not reconnecting for more than 30 s) and every 429 discord.py receives counted."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from adapters.discord.adapter import RECONNECT_GRACE_S, GatewayWatch, rate_limit_trace
from core.store.db import Database
from tests.adapters.discord.harness import make_world, running_bot, wait_for_text
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.observe import sample


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


def test_ready_after_ready_and_through_a_short_reconnect_not_a_long_one() -> None:
    clock = FakeClock()
    watch = GatewayWatch(clock)
    assert watch.reason() == "the gateway has not sent READY yet"
    watch.up()
    assert watch.reason() is None
    watch.down()
    clock.t += RECONNECT_GRACE_S
    assert watch.reason() is None  # a resume within the grace is normal
    watch.down()  # a second close while reconnecting keeps the first moment
    clock.t += 1
    assert watch.reason() == f"the gateway has been reconnecting for {RECONNECT_GRACE_S + 1:.0f} s"
    watch.up()  # RESUMED
    assert watch.reason() is None


async def test_the_adapter_is_ready_once_connected_and_not_after_close(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    async with running_bot(discord_emulator, db, openai_emulator) as (adapter, _):
        assert await adapter.readiness() is None
    assert await adapter.readiness() is not None


async def test_every_429_is_counted_by_method_and_route_without_ids() -> None:
    async def limited(request: web.Request) -> web.Response:
        return web.json_response({"retry_after": 0.1}, status=429)

    app = web.Application()
    app.router.add_patch("/api/v10/channels/{channel}/messages/{message}", limited)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    route = "PATCH /api/v10/channels/{id}/messages/{id}"
    before = sample("relaybot_rate_limited_total", platform="discord", method=route)
    try:
        async with aiohttp.ClientSession(trace_configs=[rate_limit_trace()]) as session:
            for message in (111, 222):
                async with session.patch(f"http://127.0.0.1:{port}/api/v10/channels/42/messages/{message}") as response:
                    assert response.status == 429
            async with session.get(f"http://127.0.0.1:{port}/nowhere") as response:
                assert response.status == 404
    finally:
        await runner.cleanup()
    assert sample("relaybot_rate_limited_total", platform="discord", method=route) == before + 2


async def test_an_answered_mention_leaves_no_message_in_discord_pys_cache(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    # Nothing reads the cache; each cached message kept ~10 objects every full collection walked.
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("Cached nowhere."))
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        asked = await dc.send_user_message(w.channel_id, w.alice, "kept?", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        await wait_for_text(dc, thread.id, "Cached nowhere.")
        assert list(adapter.client.cached_messages) == []
