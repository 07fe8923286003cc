"""Small facts by key: written, read, and the old ones of a kind forgotten (a native stream's run, after a week)."""

from __future__ import annotations

from adapters.slack.controls import STREAM_RUN_KEEP_S, StreamRuns
from core.store.app_state import AppStateStore
from core.store.db import Database


async def _age(db: Database, key: str, seconds: float) -> None:
    async with db.connection() as conn:
        await conn.execute("UPDATE app_state SET updated_at = now() - make_interval(secs => %s) WHERE key = %s",
                           (seconds, key))


async def test_forget_removes_only_the_old_rows_of_its_prefix(db: Database) -> None:
    state = AppStateStore(db)
    for key in ("kind:old", "kind:new", "other:old", "kind_like:old"):
        await state.put(key, "v")
    for key in ("kind:old", "other:old", "kind_like:old"):
        await _age(db, key, 3600)
    assert await state.forget("kind:", older_than_s=60) == 1
    assert await state.get("kind:old") is None
    assert [await state.get(key) for key in ("kind:new", "other:old", "kind_like:old")] == ["v", "v", "v"]


async def test_the_runs_of_native_streams_are_forgotten_after_a_week_and_pruning_runs_at_most_hourly(db: Database) -> None:
    state = AppStateStore(db)
    streams = StreamRuns(state)
    await state.put("slack:stream-run:C1:1.0", "run-old")
    await state.put("slack:stream-run:C1:2.0", "run-recent")
    await _age(db, "slack:stream-run:C1:1.0", STREAM_RUN_KEEP_S + 60)
    await streams.prune()
    assert await streams.run_of("C1", "1.0") is None
    assert await streams.run_of("C1", "2.0") == "run-recent"
    await state.put("slack:stream-run:C1:3.0", "run-3")
    await _age(db, "slack:stream-run:C1:3.0", STREAM_RUN_KEEP_S + 60)
    await streams.prune()  # within the hour: nothing asked of the database
    assert await streams.run_of("C1", "3.0") == "run-3"
