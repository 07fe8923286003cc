"""The event record written before an ack: its own lane to the database, a burst in one statement, no event lost
when its asker stops waiting."""

from __future__ import annotations

import asyncio
import contextlib

import psycopg

from core.store.db import Database
from core.store.processed_events import ProcessedEvents


async def test_an_event_is_recorded_while_every_shared_connection_is_held_by_answers(db: Database) -> None:
    # Answers hold the whole shared pool (a burst of runs); the record that decides the ack must not wait for them.
    async with contextlib.AsyncExitStack() as held:
        for _ in range(db.pool.max_size):
            await held.enter_async_context(db.connection())
        recorded = await asyncio.wait_for(ProcessedEvents(db).first_time("slack", "EvHeld"), 20)
        assert recorded is True
        assert db.pool.get_stats().get("requests_waiting", 0) == 0


async def test_a_burst_of_a_hundred_events_is_written_in_a_few_statements_each_told_once(db: Database) -> None:
    events = ProcessedEvents(db)
    statements = 0
    run = db.intake.run

    async def counted(work):  # counts the statements; the writes are real
        nonlocal statements
        statements += 1
        return await run(work)

    db.intake.run = counted  # type: ignore[method-assign]
    ids = [f"EvBurst{n}" for n in range(100)]
    first = await asyncio.gather(*(events.first_time("slack", event_id) for event_id in ids))
    again = await asyncio.gather(*(events.first_time("slack", event_id) for event_id in ids[:10]))
    assert first == [True] * 100
    assert again == [False] * 10
    assert 1 <= statements <= 3  # the first id alone, then the rest as they queued behind it (and the ten again)
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM processed_events WHERE event_id LIKE 'EvBurst%%'")
        assert (await cursor.fetchone())[0] == 100


async def test_the_same_event_asked_twice_in_one_statement_is_new_once(db: Database) -> None:
    events = ProcessedEvents(db)
    results = await asyncio.gather(events.first_time("slack", "EvTwice"), events.first_time("slack", "EvTwice"),
                                   events.first_time("discord", "EvTwice"))
    assert sorted(results[:2]) == [False, True]
    assert results[2] is True


async def test_an_event_written_after_its_asker_gave_up_is_new_for_its_redelivery(db: Database, database_url: str) -> None:
    # Another transaction holds the same key uncommitted: our statement waits on it, the asker gives up (the
    # platform's ack deadline), then the other rolls back and our statement writes the id after all.
    events = ProcessedEvents(db)
    blocker = await psycopg.AsyncConnection.connect(database_url)
    try:
        await blocker.execute("INSERT INTO processed_events (platform, event_id) VALUES ('slack', 'EvLate')")
        asker = asyncio.create_task(events.first_time("slack", "EvLate"))
        # The asker gives up once our INSERT waits on the other's row (not before it was sent: a loaded machine
        # may take longer than any fixed wait to open the lane's connection).
        await _until_blocked(database_url)
        assert not asker.done()
        asker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asker
        await blocker.rollback()
        await _until_written(db, "EvLate")
    finally:
        await blocker.close()
    # Not acked, so the platform sends it again: this process wrote it for nobody, so it is still to be taken.
    assert await events.first_time("slack", "EvLate") is True
    assert await events.first_time("slack", "EvLate") is False


async def _until_blocked(database_url: str, limit_s: float = 30.0) -> None:
    """Until a statement waits for a lock on processed_events (bounded)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        deadline = asyncio.get_running_loop().time() + limit_s
        while asyncio.get_running_loop().time() < deadline:
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE NOT l.granted AND a.query LIKE '%%processed_events%%'"
            )
            row = await cursor.fetchone()
            if row and row[0]:
                return
            await asyncio.sleep(0.02)
    raise AssertionError("no statement on processed_events waited for the other's row")


async def test_a_database_down_fails_every_asker_of_the_statement_and_the_next_ask_writes_again(db: Database, outage) -> None:
    events = ProcessedEvents(db)
    await outage.down()
    results = await asyncio.gather(*(events.first_time("slack", f"EvDown{n}") for n in range(5)), return_exceptions=True)
    assert all(isinstance(result, Exception) for result in results), results
    await outage.up()
    assert await asyncio.wait_for(events.first_time("slack", "EvDown0"), 30) is True


async def _until_written(db: Database, event_id: str) -> None:
    for _ in range(200):
        async with db.connection() as conn:
            cursor = await conn.execute("SELECT 1 FROM processed_events WHERE event_id = %s", (event_id,))
            if await cursor.fetchone() is not None:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{event_id} was never written")
