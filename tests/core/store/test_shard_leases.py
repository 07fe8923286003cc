"""Discord shard leases: a fair part each, free shards only, a dead owner's taken over, fixed ids win, and a
process with another shard count refused with a sentence."""

from __future__ import annotations

import asyncio
import uuid

from core.store.db import Database
from core.store.heartbeats import STALE_AFTER_S, Heartbeats
from core.store.shard_leases import ShardLeases


async def _alive(db: Database, *owners: str) -> list[ShardLeases]:
    for owner in owners:
        await Heartbeats(db, owner=owner).beat()
    return [ShardLeases(db, owner=owner) for owner in owners]


async def _dies(db: Database, owner: str) -> None:
    """Its heartbeat goes stale (a kill -9: the row stays, its stamp no longer moves)."""
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE process_heartbeats SET seen_at = now() - make_interval(secs => %s) WHERE owner = %s",
            (STALE_AFTER_S + 1, owner),
        )


def _bot() -> str:
    return f"bot-{uuid.uuid4().hex[:8]}"


async def test_a_newcomer_takes_one_shard_a_claim_from_the_richest_until_the_spread_is_even(db: Database) -> None:
    bot = _bot()
    a, b = await _alive(db, "a", "b")
    assert await a.claim(bot=bot, shard_count=4) == ((0, 1, 2, 3), None), "alone: every shard"
    assert await b.claim(bot=bot, shard_count=4) == ((3,), None), "nothing free: one from the one holding the most"
    assert await a.claim(bot=bot, shard_count=4) == ((0, 1, 2), None), "it finds it gone at its next claim"
    assert await b.claim(bot=bot, shard_count=4) == ((2, 3), None)
    assert await a.claim(bot=bot, shard_count=4) == ((0, 1), None)
    assert await b.claim(bot=bot, shard_count=4) == ((2, 3), None), "even: nothing moves any more"
    assert await a.claim(bot=bot, shard_count=4) == ((0, 1), None)

    other = _bot()
    c, d = await _alive(db, "c", "d")
    assert await c.claim(bot=other, shard_count=4) == ((0, 1, 2, 3), None)
    await Heartbeats(db, owner="c").stop()  # a clean stop: its shards are free at once
    assert await d.claim(bot=other, shard_count=4) == ((0, 1, 2, 3), None)


async def test_claims_at_once_settle_on_an_even_spread_with_each_shard_once(db: Database) -> None:
    bot = _bot()
    leases = await _alive(db, *(f"p{n}" for n in range(3)))
    claims = await asyncio.gather(*(lease.claim(bot=bot, shard_count=6) for lease in leases))
    assert all(refused is None for _, refused in claims)
    for _ in range(10):  # beats, one claim each, until nothing moves
        before = claims
        claims = [await lease.claim(bot=bot, shard_count=6) for lease in leases]
        if claims == before:
            break
    held = [shards for shards, _ in claims]
    assert sorted(s for shards in held for s in shards) == list(range(6)), "each shard once"
    assert [len(shards) for shards in held] == [2, 2, 2]


async def test_standbys_split_a_dead_holders_shards_each_taking_its_fair_part(db: Database) -> None:
    bot = _bot()
    holder, a, b = await _alive(db, "holder", "standby-a", "standby-b")
    assert await holder.claim(bot=bot, shard_count=4, fixed=[0, 1, 2, 3]) == ((0, 1, 2, 3), None)
    assert await a.claim(bot=bot, shard_count=4) == ((), None), "a fixed holder's shards are never taken"
    assert await b.claim(bot=bot, shard_count=4) == ((), None)
    await _dies(db, "holder")
    assert await a.claim(bot=bot, shard_count=4) == ((0, 1), None), "ceil(4 / 2 live members)"
    assert await b.claim(bot=bot, shard_count=4) == ((2, 3), None)


async def test_a_dead_owners_shards_are_taken_over_by_a_live_process(db: Database) -> None:
    bot = _bot()
    a, b = await _alive(db, "dies", "survives")
    assert await a.claim(bot=bot, shard_count=2, fixed=[0]) == ((0,), None)
    assert await b.claim(bot=bot, shard_count=2, fixed=[1]) == ((1,), None)
    late = ShardLeases(db, owner="late")
    await Heartbeats(db, owner="late").beat()
    assert await late.claim(bot=bot, shard_count=2) == ((), None), "both held by live processes, by setting"
    await _dies(db, "dies")
    assert await late.claim(bot=bot, shard_count=2) == ((0,), None), "the dead one's shard, taken over"
    assert await b.claim(bot=bot, shard_count=2, fixed=[1]) == ((1,), None)


async def test_fixed_shard_ids_are_taken_whoever_held_them_and_the_rest_given_back(db: Database) -> None:
    bot = _bot()
    auto, fixed = await _alive(db, "auto", "fixed")
    assert await auto.claim(bot=bot, shard_count=2) == ((0, 1), None)
    assert await fixed.claim(bot=bot, shard_count=2, fixed=[1]) == ((1,), None)
    assert await auto.claim(bot=bot, shard_count=2) == ((0,), None), "it learns on its next claim that 1 went"
    assert await fixed.claim(bot=bot, shard_count=2, fixed=[]) == ((), None)
    assert await auto.claim(bot=bot, shard_count=2) == ((0, 1), None)


async def test_another_shard_count_than_the_live_processes_is_refused_with_a_sentence(db: Database) -> None:
    bot = _bot()
    two, four = await _alive(db, "runs-two", "runs-four")
    assert await two.claim(bot=bot, shard_count=2) == ((0, 1), None)
    shards, refused = await four.claim(bot=bot, shard_count=4)
    assert shards == ()
    assert refused is not None
    assert "DISCORD_SHARD_COUNT is 4 here but 2" in refused and "runs-two" in refused and "same count" in refused
    assert await two.claim(bot=bot, shard_count=2) == ((0, 1), None), "the refused one is no member"
    await _dies(db, "runs-two")
    assert await four.claim(bot=bot, shard_count=4) == ((0, 1, 2, 3), None), "the old count's processes are gone"
