"""A database that drops its connections mid-answer: the pool replaces them (checked before each hand-out), so
the answer ends whole — or, where a step needed the lost connection, in a clear sentence — and the next question works."""

from __future__ import annotations

import psycopg

from core.events import AnswerDelta, Done, Failed
from core.store.db import Database
from tests.core.engine.support import request
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine


async def test_connections_killed_mid_answer_are_replaced_and_the_answer_ends_whole(
    db: Database, openai_emulator: OpenAIEmulator, database_url: str
) -> None:
    engine = make_engine(db, openai_emulator.base_url)
    openai_emulator.script(Text("a slow answer that outlives its connections", chunk_chars=4, delay_s=0.02), Text("Back."))
    events = []
    async for event in engine.ask(request("first", channel="C-blip")):
        events.append(event)
        if len(events) == 2:  # after the run's RunStarted, its first text
            assert isinstance(event, AnswerDelta)
            with psycopg.connect(database_url, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
    # Dead connections are checked out of the pool before they are handed out, so nothing after the blip fails.
    assert isinstance(events[-1], Done), events[-1]
    assert events[-1].answer == "a slow answer that outlives its connections"
    assert not any(isinstance(event, Failed) for event in events)
    again = [event async for event in engine.ask(request("second", channel="C-blip"))]
    assert isinstance(again[-1], Done) and again[-1].answer == "Back."
