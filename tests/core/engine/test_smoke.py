"""Streaming answers end to end through the engine, the emulator and Postgres."""

from __future__ import annotations

from core.events import AnswerDelta, Done
from core.requests import Actor, ConversationKey, Request
from core.store.db import Database
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine


def ask(question: str, channel: str = "C1", user: str = "U1") -> Request:
    return Request(
        question=question,
        conversation=ConversationKey(platform="test", workspace="W", channel=channel),
        user=Actor(id=user, name="Ada"),
    )


async def test_streamed_text_joins_to_done(db: Database, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(Text("Hello there, this is a streamed answer."))
    engine = make_engine(db, openai_emulator.base_url)
    events = [event async for event in engine.ask(ask("hi"))]
    deltas = "".join(event.text for event in events if isinstance(event, AnswerDelta))
    assert deltas == "Hello there, this is a streamed answer."
    assert isinstance(events[-1], Done) and events[-1].answer == deltas
