"""Conversation locks serialise runs and are released even when a run is cancelled or abandoned."""

from __future__ import annotations

import asyncio
import gc

from core.store.db import Database
from core.store.locks import ConversationLocks


async def test_second_holder_waits_for_the_first(db: Database) -> None:
    locks = ConversationLocks(db)
    order: list[str] = []

    async def run(name: str, hold_s: float) -> None:
        async with locks.hold(41):
            order.append(f"{name} in")
            await asyncio.sleep(hold_s)
            order.append(f"{name} out")

    first = asyncio.create_task(run("a", 0.2))
    await asyncio.sleep(0.05)
    await asyncio.wait_for(asyncio.gather(first, run("b", 0)), 10)
    assert order == ["a in", "a out", "b in", "b out"]


async def test_another_instance_is_excluded_by_the_advisory_lock(db: Database, database_url: str, tmp_path) -> None:
    other_db = Database(url=database_url, data_dir=tmp_path)
    await other_db.open()
    try:
        mine, theirs = ConversationLocks(db), ConversationLocks(other_db)
        their_lock = theirs.hold(42)
        async with mine.hold(42):
            waiting = asyncio.create_task(their_lock.__aenter__())
            await asyncio.sleep(0.2)
            assert not waiting.done()  # a second instance cannot enter the same conversation
        await asyncio.wait_for(waiting, 10)
        await their_lock.__aexit__(None, None, None)
    finally:
        await other_db.close()


async def test_cancelled_run_releases_the_lock(db: Database) -> None:
    locks = ConversationLocks(db)
    entered = asyncio.Event()

    async def long_run() -> None:
        async with locks.hold(43):
            entered.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(long_run())
    await entered.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    async with asyncio.timeout(10):
        async with locks.hold(43):
            pass


async def test_abandoned_run_releases_the_lock(db: Database) -> None:
    locks = ConversationLocks(db)

    async def events():
        async with locks.hold(44):
            yield "first"
            yield "never read"

    stream = events()
    assert await anext(stream) == "first"
    del stream  # the consumer walked away without closing the stream
    gc.collect()
    async with asyncio.timeout(10):
        async with locks.hold(44):
            pass


async def test_a_crashed_holders_lease_runs_out(db: Database) -> None:
    from core.store.conversations import ConversationStore
    from core.requests import ConversationKey

    conversation = await ConversationStore(db).get_or_create(ConversationKey(platform="t", workspace="w", channel="lease"))
    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO conversation_leases (conversation_id, holder, expires_at) VALUES (%s, 'gone:1', now() - interval '1 second')",
            (conversation,),
        )
    async with asyncio.timeout(10):
        async with ConversationLocks(db).hold(conversation):
            pass


async def _lease_holder(db: Database, conversation: int) -> str | None:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT holder FROM conversation_leases WHERE conversation_id = %s", (conversation,))
        row = await cursor.fetchone()
    return None if row is None else row[0]


async def test_a_run_whose_lease_another_process_took_is_cancelled_not_renewed_beside_it(
    db: Database, database_url: str, tmp_path
) -> None:
    from core.requests import ConversationKey
    from core.store.conversations import ConversationStore

    conversation = await ConversationStore(db).get_or_create(ConversationKey(platform="t", workspace="w", channel="lost"))
    other_db = Database(url=database_url, data_dir=tmp_path)
    await other_db.open()
    try:
        mine, theirs = ConversationLocks(db, renew_every_s=0.05), ConversationLocks(other_db, renew_every_s=0.05)
        inside, went_on = asyncio.Event(), []

        async def run() -> None:
            async with mine.hold(conversation):
                inside.set()
                await asyncio.sleep(30)
                went_on.append(True)

        first = asyncio.create_task(run())
        await asyncio.wait_for(inside.wait(), 10)
        # Its renewals failed past the lease (a long database outage, a paused VM): the lease ran out.
        async with db.connection() as conn:
            await conn.execute("UPDATE conversation_leases SET expires_at = now() - interval '1 second'"
                               " WHERE conversation_id = %s", (conversation,))
        async with asyncio.timeout(10):
            async with theirs.hold(conversation):
                taken_by = await _lease_holder(db, conversation)
                try:
                    await asyncio.wait_for(first, 5)
                except asyncio.CancelledError:
                    pass
                assert first.cancelled() and not went_on, "the first run went on beside the one that took its lease"
                # The first run's renewal did not take the lease back, nor did its exit give the other's away.
                assert await _lease_holder(db, conversation) == taken_by and taken_by is not None
        assert await _lease_holder(db, conversation) is None
    finally:
        await other_db.close()

