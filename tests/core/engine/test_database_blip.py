"""A database that drops its connections mid-answer: a clear sentence, then the next question works."""

from __future__ import annotations

import psycopg

from core import wording
from core.events import AnswerDelta, Done, Failed
from core.store.db import Database
from tests.core.engine.support import request
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine


async def test_connections_killed_mid_answer_end_in_a_sentence_and_the_bot_recovers(
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
    assert isinstance(events[-1], Failed) and events[-1].message == wording.database_unavailable()
    again = [event async for event in engine.ask(request("second", channel="C-blip"))]
    assert isinstance(again[-1], Done) and again[-1].answer == "Back."
