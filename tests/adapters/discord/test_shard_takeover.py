"""A Discord adapter taking a dead process's shards over: mid-answer, the answer under way ends whole through the old
client, which closes after it, and the new client hears both shards; standing by (no shard free), it is ready and
connects once their process dies."""

from __future__ import annotations

from core.store.db import Database
from core.store.heartbeats import STALE_AFTER_S, Heartbeats
from core.store.shard_leases import ShardLeases
from adapters.discord import DiscordAdapter
from tests.adapters.discord.harness import bot_settings, tuning_for, wait_for_text
from tests.emulators.discord import DiscordEmulator, point_discord_py_at
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine
from tests.support.ports import ports_for

SLOW = "a slow answer that is still streaming while its shard's neighbour is taken over"


async def test_a_takeover_mid_answer_finishes_that_answer_and_then_hears_both_shards(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator,
) -> None:
    dc = discord_emulator
    dc.world.max_concurrency = 2  # a bot whose two shards may identify at once (no 5 s between them)
    zero = dc.add_guild("zero", on_shard=(0, 2))
    one = dc.add_guild("one", on_shard=(1, 2))
    channels = {zero: dc.add_channel(zero, "general"), one: dc.add_channel(one, "general")}
    ada = dc.add_user("ada")
    bot = str(dc.bot_user_id)
    for owner in ("other", "this"):
        await Heartbeats(db, owner=owner).beat()
    assert await ShardLeases(db, owner="other").claim(bot=bot, shard_count=2, fixed=[0]) == ((0,), None)

    engine = make_engine(db, openai_emulator.base_url, **bot_settings(dc, discord_shard_count=2))
    adapter = DiscordAdapter(settings=engine.settings, engine=engine, ports=ports_for(db), tuning=tuning_for(dc.time_scale))
    adapter.use_shard_leases(ShardLeases(db, owner="this"))
    with point_discord_py_at(dc):
        await adapter.start()
        try:
            assert dc.live_shards == [(1, 2)], "shard 0 is the other live process's"
            openai_emulator.script_fn(lambda body: Text(SLOW, chunk_chars=2, delay_s=0.2))
            asked = await dc.send_user_message(channels[one], ada, "slow?", mentions_bot=True)
            thread = await dc.wait_for(lambda: dc.thread_of(asked), what="the answer's thread")
            await dc.wait_for(lambda: dc.messages(thread.id), what="the answer under way")

            async with db.connection() as conn:
                await conn.execute(
                    "UPDATE process_heartbeats SET seen_at = now() - make_interval(secs => %s) WHERE owner = 'other'",
                    (STALE_AFTER_S + 1,),
                )
            await adapter.maintain()  # the beat: shard 0 is free, taken over by a new client over both
            assert adapter.runner.inflight == 1, "the answer still streams"
            assert sorted(set(dc.live_shards)) == [(0, 2), (1, 2)]
            assert dc.requests_to("get_gateway_bot"), "each client asks how many shards may identify at once"
            await wait_for_text(dc, thread.id, SLOW)
            await dc.wait_for(lambda: dc.live_shards == [(0, 2), (1, 2)], what="the old client closed after its answer")

            openai_emulator.script_fn(lambda body: Text("answered on shard 0"))
            asked = await dc.send_user_message(channels[zero], ada, "and here?", mentions_bot=True)
            thread = await dc.wait_for(lambda: dc.thread_of(asked), what="shard 0's thread")
            await wait_for_text(dc, thread.id, "answered on shard 0")
        finally:
            await adapter.close()
    assert dc.live_session_count == 0


async def test_a_process_with_no_free_shard_stands_by_ready_and_connects_once_their_process_dies(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator,
) -> None:
    dc = discord_emulator
    dc.world.max_concurrency = 2
    guild = dc.add_guild("zero", on_shard=(0, 2))
    channel = dc.add_channel(guild, "general")
    ada = dc.add_user("ada")
    for owner in ("holds-both", "stands-by"):
        await Heartbeats(db, owner=owner).beat()
    held = await ShardLeases(db, owner="holds-both").claim(bot=str(dc.bot_user_id), shard_count=2, fixed=[0, 1])
    assert held == ((0, 1), None)

    engine = make_engine(db, openai_emulator.base_url, **bot_settings(dc, discord_shard_count=2))
    adapter = DiscordAdapter(settings=engine.settings, engine=engine, ports=ports_for(db), tuning=tuning_for(dc.time_scale))
    adapter.use_shard_leases(ShardLeases(db, owner="stands-by"))
    with point_discord_py_at(dc):
        await adapter.start()
        try:
            assert dc.live_session_count == 0, "no gateway session while it stands by"
            assert await adapter.readiness() is None, "standing by is ready: its jobs run"
            await adapter.maintain()
            assert dc.live_session_count == 0, "a beat with nothing free changes nothing"
            async with db.connection() as conn:
                await conn.execute(
                    "UPDATE process_heartbeats SET seen_at = now() - make_interval(secs => %s) WHERE owner = 'holds-both'",
                    (STALE_AFTER_S + 1,),
                )
            await adapter.maintain()
            assert dc.live_shards == [(0, 2), (1, 2)]
            assert await adapter.readiness() is None
            openai_emulator.script_fn(lambda body: Text("answered after the takeover"))
            asked = await dc.send_user_message(channel, ada, "anyone?", mentions_bot=True)
            thread = await dc.wait_for(lambda: dc.thread_of(asked), what="the thread")
            await wait_for_text(dc, thread.id, "answered after the takeover")
        finally:
            await adapter.close()
    assert dc.live_session_count == 0
