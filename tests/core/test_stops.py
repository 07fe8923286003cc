"""Stop's time rules use the database's clock, and a Stop that lands as a run ends does not mark a whole answer stopped."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import core.stops
from core.engine import Engine
from core.events import Done, Event, RunStarted, Stopped
from core.requests import Actor, ConversationKey
from core.store.db import Database
from core.store.run_stops import RunStopStore
from core.stops import RunStops
from core.tools import ApprovalPolicy
from tests.core.engine.support import request
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine

ADA = Actor(id="U1", name="Ada")
WHERE = ConversationKey(platform="test", workspace="W", channel="C-stops")


class _ClockAhead(datetime):
    """This process's wall clock, 90 s ahead of the database's (NTP gone wrong on one host)."""

    @classmethod
    def now(cls, tz: object = None) -> datetime:  # type: ignore[override]
        return datetime.now(timezone.utc) + timedelta(seconds=90)


async def _row(db: Database, run_id: str) -> tuple[str | None, str | None]:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT outcome, stop_by FROM run_stops WHERE run_id = %s", (uuid.UUID(run_id),))
        row = await cursor.fetchone()
    assert row is not None
    return row[0], row[1]


async def test_a_stop_clicked_on_a_process_whose_clock_is_ahead_stops_the_run(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    stops = RunStops(store=RunStopStore(db), policy=ApprovalPolicy())
    run_id = str(uuid.uuid4())
    # Stop reads no clock of its own: whatever time this process thinks it is cannot make a live run look dead.
    monkeypatch.setattr(core.stops, "datetime", _ClockAhead, raising=False)
    async with stops.running(run_id, WHERE, asked_by=ADA.id) as signal:
        result = await stops.request(run_id, actor=ADA)
        assert result.outcome == "stopping", result
        assert signal.is_set()
    assert await _row(db, run_id) == ("stopped", "Ada")


async def test_a_run_not_seen_for_a_minute_by_the_databases_clock_is_over(db: Database) -> None:
    stops = RunStops(store=RunStopStore(db), policy=ApprovalPolicy())
    store = RunStopStore(db)
    quiet, recent = str(uuid.uuid4()), str(uuid.uuid4())
    for run_id, ago_s in ((quiet, 90), (recent, 30)):
        await store.started(run_id, WHERE, asked_by=ADA.id)
        async with db.connection() as conn:
            await conn.execute("UPDATE run_stops SET seen_at = now() - make_interval(secs => %s) WHERE run_id = %s",
                               (ago_s, uuid.UUID(run_id)))
    late = await stops.request(quiet, actor=ADA)
    assert late.outcome == "ended" and "already finished" in late.message
    assert not await store.request_stop(quiet, by_id=ADA.id, by="Ada")  # nor can another path write it
    assert (await stops.request(recent, actor=ADA)).outcome == "stopping"


async def test_a_stop_after_the_run_reached_its_end_is_too_late_and_the_row_says_answered(db: Database) -> None:
    stops = RunStops(store=RunStopStore(db), policy=ApprovalPolicy())
    run_id, raced = str(uuid.uuid4()), str(uuid.uuid4())
    async with stops.running(run_id, WHERE, asked_by=ADA.id) as signal:
        signal.finish()
        signal.outcome = "answered"
        result = await stops.request(run_id, actor=ADA)
        assert result.outcome == "ended" and "already finished" in result.message
        assert not signal.is_set()
    assert await _row(db, run_id) == ("answered", None)

    # The click came as the last step ended: the run still ends as answered.
    async with stops.running(raced, WHERE, asked_by=ADA.id) as signal:
        assert (await stops.request(raced, actor=ADA)).outcome == "stopping"
        signal.finish()
        signal.outcome = "answered"
    assert (await _row(db, raced))[0] == "answered"


async def _blocked_on_messages(db: Database) -> bool:
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_locks WHERE relation = 'messages'::regclass AND NOT granted"
        )
        row = await cursor.fetchone()
    return bool(row and row[0])


async def test_a_stop_landing_while_a_finished_answer_is_stored_leaves_it_whole(
    db: Database, database_url: str, openai_emulator: OpenAIEmulator
) -> None:
    engine: Engine = make_engine(db, openai_emulator.base_url)
    openai_emulator.script(Text("the whole answer, every word of it"))
    events: list[Event] = []

    async def ask() -> None:
        async for event in engine.ask(request("tell me", channel="C-race")):
            events.append(event)

    # The turn's storing waits on this lock: the run has its final answer and is writing it when Stop lands.
    async with await psycopg.AsyncConnection.connect(database_url) as holder:
        await holder.execute("LOCK TABLE messages IN EXCLUSIVE MODE")
        asking = asyncio.create_task(ask())
        for _ in range(500):
            if await _blocked_on_messages(db):
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("the run never got to storing its turn")
        assert isinstance(events[0], RunStarted)
        run_id = events[0].run_id
        result = await engine.runs.stop(run_id, actor=ADA)
        await holder.commit()
    await asyncio.wait_for(asking, 30)

    assert result.outcome == "ended" and "already finished" in result.message
    assert isinstance(events[-1], Done) and not any(isinstance(event, Stopped) for event in events)
    assert events[-1].answer == "the whole answer, every word of it"
    assert await _row(db, run_id) == ("answered", None)
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM messages WHERE turn_id = %s AND role = 'assistant'",
                                    (uuid.UUID(run_id),))
        row = await cursor.fetchone()
    assert row is not None and row[0] == 1


async def test_a_stop_from_another_team_finds_no_run_and_one_from_the_runs_team_stops_it(db: Database) -> None:
    # Run ids travel in buttons: a click from team B naming team A's run is told there is none (even by its asker's
    # id, or an admin of B), as an approval of another team is not found.
    stops = RunStops(store=RunStopStore(db), policy=ApprovalPolicy())
    run_id = str(uuid.uuid4())
    async with stops.running(run_id, WHERE, asked_by=ADA.id) as signal:
        other = await stops.request(run_id, actor=Actor(id=ADA.id, name="Ada", is_admin=True), team="test:OTHER")
        assert other.outcome == "not_found" and not signal.is_set()
        own = await stops.request(run_id, actor=ADA, team="test:W")
        assert own.outcome == "stopping" and signal.is_set()
