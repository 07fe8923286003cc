"""Group commit: a burst of writes in a statement or two, each caller told its own result, failures and give-ups
reported, and the live records of a burst of answers written that way."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from core.ports import LiveMessage
from core.store.db import Database
from core.store.group_commit import GroupCommit, last_per_key
from core.store.live_messages import LiveMessages


async def test_a_burst_is_written_in_two_batches_and_each_caller_gets_its_own_result() -> None:
    batches: list[list[int]] = []

    async def write(items: list[int]) -> list[int]:
        batches.append(items)
        await asyncio.sleep(0)
        return [item * 10 for item in items]

    commit: GroupCommit[int, int] = GroupCommit(write)
    results = await asyncio.gather(*(commit.ask(n) for n in range(100)))
    assert results == [n * 10 for n in range(100)]
    # Asked before the writer first ran, all go in one statement (asked while one ran, they would go in the next).
    assert [len(batch) for batch in batches] == [100]


async def test_items_asked_while_a_write_runs_go_in_the_next_one() -> None:
    batches: list[list[int]] = []
    running = asyncio.Event()
    release = asyncio.Event()

    async def write(items: list[int]) -> list[int]:
        batches.append(items)
        running.set()
        await release.wait()
        return items

    commit: GroupCommit[int, int] = GroupCommit(write)
    first = asyncio.create_task(commit.ask(0))
    await running.wait()
    later = [asyncio.create_task(commit.ask(n)) for n in range(1, 6)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(first, *later) == [0, 1, 2, 3, 4, 5]
    assert batches == [[0], [1, 2, 3, 4, 5]]


async def test_a_failed_write_fails_its_callers_only_and_the_next_batch_is_written() -> None:
    calls = 0

    async def write(items: list[str]) -> list[str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("database down")
        return items

    commit: GroupCommit[str, str] = GroupCommit(write)
    first = asyncio.create_task(commit.ask("a"))
    await asyncio.sleep(0)
    second = asyncio.create_task(commit.ask("b"))
    with pytest.raises(ConnectionError):
        await first
    assert await second == "b"


async def test_a_result_whose_caller_gave_up_is_handed_to_unheard() -> None:
    release = asyncio.Event()
    unheard: list[tuple[str, str]] = []

    async def write(items: list[str]) -> list[str]:
        await release.wait()
        return [f"{item}!" for item in items]

    commit: GroupCommit[str, str] = GroupCommit(write, unheard=lambda item, result: unheard.append((item, result)))
    waiting = asyncio.create_task(commit.ask("x"))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    release.set()
    assert await commit.ask("y") == "y!"
    assert unheard == [("x", "x!")]


def test_of_several_writes_for_one_key_the_last_counts_in_its_place() -> None:
    assert last_per_key([("a", 1), ("b", 1), ("a", 2)], key=lambda item: item[0]) == [("b", 1), ("a", 2)]


def _message(n: int) -> LiveMessage:
    return LiveMessage(platform="slack", workspace="T1", channel=f"C{n}", message_id=f"{n}.0", thread="")


async def test_a_burst_of_answers_records_is_written_in_a_few_transactions(db: Database) -> None:
    live = LiveMessages(db, owner="burst-owner")
    transactions = 0
    run = db.deliveries.run

    async def counted(work):  # counts the transactions; the writes are real
        nonlocal transactions
        transactions += 1
        return await run(work)

    db.deliveries.run = counted  # type: ignore[method-assign]
    await asyncio.gather(*(live.add(_message(n), answer_id=f"a{n}") for n in range(100)))
    added = transactions
    await asyncio.gather(*(live.remove(platform="slack", channel=f"C{n}", message_id=f"{n}.0") for n in range(50)))
    assert added <= 3
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT count(*), count(DISTINCT answer_id) FROM live_messages WHERE owner = 'burst-owner'")
        assert await cursor.fetchone() == (50, 50)
        cursor = await conn.execute("SELECT seen_at IS NOT NULL FROM process_heartbeats WHERE owner = 'burst-owner'")
        assert await cursor.fetchone() == (True,)


async def test_an_add_and_a_remove_of_one_message_in_one_batch_end_as_the_last_asked(db: Database) -> None:
    live = LiveMessages(db, owner="order-owner")
    gone, kept = _message(900), _message(901)
    await asyncio.gather(
        live.add(gone, answer_id="a"), live.remove(platform="slack", channel=gone.channel, message_id=gone.message_id),
        live.remove(platform="slack", channel=kept.channel, message_id=kept.message_id), live.add(kept, answer_id="b"),
    )
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT message_id FROM live_messages WHERE owner = 'order-owner'")
        assert await cursor.fetchall() == [("901.0",)]


async def test_a_live_record_is_written_while_every_shared_connection_is_held_by_answers(db: Database) -> None:
    live = LiveMessages(db, owner="held-owner")
    async with contextlib.AsyncExitStack() as held:
        for _ in range(db.pool.max_size):
            await held.enter_async_context(db.connection())
        await asyncio.wait_for(live.add(_message(950), answer_id="a"), 20)
        await asyncio.wait_for(live.remove(platform="slack", channel="C950", message_id="950.0"), 20)
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM live_messages WHERE owner = 'held-owner'")
        assert await cursor.fetchone() == (0,)
