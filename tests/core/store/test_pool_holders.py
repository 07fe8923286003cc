"""An exhausted pool says what holds it: a wait past POOL_SLOW_S logs each holder's task and where it waits."""

from __future__ import annotations

import asyncio
import logging

import pytest

from core.store import db as db_module
from core.store.db import Database


async def test_a_long_wait_for_a_connection_names_the_tasks_that_hold_them_and_then_gets_one(
    db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(db_module, "POOL_SLOW_S", 0.2)
    release = asyncio.Event()
    held = 0

    async def hold_one_while_a_slow_call_runs() -> None:
        nonlocal held
        async with db.connection():
            held += 1
            await release.wait()

    holders = [asyncio.create_task(hold_one_while_a_slow_call_runs(), name=f"holder-{n}") for n in range(db.pool.max_size)]
    # Bounded, but long enough for a loaded machine (two test workers) to open the pool's connections one by one.
    for _ in range(6000):
        if held == db.pool.max_size:
            break
        await asyncio.sleep(0.01)
    assert held == db.pool.max_size, f"only {held} of {db.pool.max_size} connections were taken"
    caplog.set_level(logging.WARNING, logger="core.store.db")

    async def waiter() -> int:
        async with db.connection() as conn:
            cursor = await conn.execute("SELECT 1")
            return (await cursor.fetchone())[0]

    waiting = asyncio.create_task(waiter())
    for _ in range(400):  # bounded: the log is due after POOL_SLOW_S
        if "held by" in caplog.text:
            break
        await asyncio.sleep(0.05)
    assert f"({db.pool.max_size} held)" in caplog.text
    assert "holder-0 in hold_one_while_a_slow_call_runs (store/test_pool_holders.py" in caplog.text
    release.set()
    assert await asyncio.wait_for(waiting, 20) == 1  # the wait goes on after the log and gets the connection
    await asyncio.gather(*holders)
