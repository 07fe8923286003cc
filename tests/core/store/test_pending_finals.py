"""The outbox of final texts: a live process keeps its own; released or orphaned finals go to exactly one taker."""

from __future__ import annotations

import asyncio

from core.ports import FinalPart, PendingFinal
from core.store.db import Database
from core.store.heartbeats import Heartbeats
from core.store.pending_finals import PendingFinals


def final(answer_id: str) -> PendingFinal:
    return PendingFinal(
        answer_id=answer_id, platform="slack", workspace="T", channel="C-out", thread="1.0",
        parts=(FinalPart(text="part one", message_id="1.1"), FinalPart(text="part two")),
    )


async def test_finals_are_taken_once_only_when_released_or_their_process_died(db: Database) -> None:
    alive, dead = PendingFinals(db, owner="alive"), PendingFinals(db, owner="dead")
    await Heartbeats(db, owner="alive").beat()
    await alive.keep(final("a-live"))
    await alive.keep(final("a-released"))
    await alive.release("a-released")
    await dead.keep(final("a-dead"))
    async with db.connection() as conn:  # then its process died: its heartbeat went stale
        await conn.execute("UPDATE process_heartbeats SET seen_at = now() - interval '1 minute' WHERE owner = 'dead'")
    takers = [PendingFinals(db, owner=f"taker-{n}") for n in range(4)]
    taken = await asyncio.gather(*(taker.take("slack") for taker in takers))
    ids = sorted(f.answer_id for batch in taken for f in batch)
    assert ids == ["a-dead", "a-released"]
    [again] = [f for batch in taken for f in batch if f.answer_id == "a-dead"]
    assert again.parts == final("a-dead").parts and again.thread == "1.0"
    assert await takers[0].take("slack") == []  # claimed by live takers now
    await alive.delivered("a-live")
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT answer_id FROM pending_finals ORDER BY answer_id")
        assert [row[0] for row in await cursor.fetchall()] == ["a-dead", "a-released"]
