"""Live answer records: a live process's records are never taken; a dead one's are taken exactly once."""

from __future__ import annotations

import asyncio

from core.ports import LiveMessage
from core.store.db import Database
from core.store.heartbeats import Heartbeats
from core.store.live_messages import LiveMessages


def message(number: int, platform: str = "slack") -> LiveMessage:
    return LiveMessage(platform=platform, workspace="T", channel="C-live", message_id=f"{number}.0")


async def test_a_live_processes_records_are_left_alone_and_a_dead_ones_taken_once(db: Database) -> None:
    alive = LiveMessages(db, owner="alive")
    dead = LiveMessages(db, owner="dead")
    await alive.add(message(1))
    await dead.add(message(2))
    async with db.connection() as conn:
        await conn.execute("UPDATE process_heartbeats SET seen_at = now() - interval '1 minute' WHERE owner = 'dead'")
    others = [LiveMessages(db, owner=f"restarted-{n}") for n in range(5)]
    taken = await asyncio.gather(*(other.take_all("slack") for other in others))
    assert sorted(m.message_id for batch in taken for m in batch) == ["2.0"], "the dead process's record, once"
    assert await alive.take_all("slack") == []  # its own records are never its orphans
    await Heartbeats(db, owner="alive").stop()  # a clean exit: the record is an orphan at once
    assert [m.message_id for m in await others[0].take_all("slack")] == ["1.0"]
    for taker, batch in zip(others, taken):  # repaired: a taker removes what it claimed
        for found in batch:
            await taker.remove(platform=found.platform, channel=found.channel, message_id=found.message_id)
    await others[0].remove(platform="slack", channel="C-live", message_id="1.0")


async def test_a_claimed_record_stays_until_removed_and_a_released_one_is_an_orphan_again(db: Database) -> None:
    await LiveMessages(db, owner="crashed").add(message(4, "discord"))
    async with db.connection() as conn:
        await conn.execute("UPDATE process_heartbeats SET seen_at = now() - interval '1 minute' WHERE owner = 'crashed'")
    repairer = LiveMessages(db, owner="repairer")
    [claimed] = await repairer.take_all("discord")
    assert await LiveMessages(db, owner="another").take_all("discord") == [], "claimed by a live repairer"
    await repairer.release(claimed)  # a 429: for the next round
    assert await LiveMessages(db, owner="another").take_all("discord") == [claimed]


async def test_records_from_before_owners_existed_count_as_orphans(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO live_messages (platform, workspace, channel, message_id, thread) VALUES ('discord', 'G', 'c', '9', '')"
        )
    assert [m.message_id for m in await LiveMessages(db, owner="new").take_all("discord")] == ["9"]


async def test_a_heartbeat_keeps_records_alive_past_the_stale_window(db: Database) -> None:
    busy = LiveMessages(db, owner="busy", stale_after_s=0.2)
    await busy.add(message(3))
    async with db.connection() as conn:
        await conn.execute("UPDATE process_heartbeats SET seen_at = now() - interval '1 second' WHERE owner = 'busy'")
    await Heartbeats(db, owner="busy").beat()
    assert await LiveMessages(db, owner="peer", stale_after_s=0.2).take_all("slack") == []
