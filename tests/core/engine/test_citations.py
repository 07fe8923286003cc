"""The engine keeps the answer without citations of no source: in Done, in history, in answer(); and says so in the log."""

from __future__ import annotations

import logging

import pytest

from core.events import AnswerDelta, Done, Sources
from core.store.db import Database
from tests.core.engine.support import request
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine
from tests.support.retriever import InMemoryRetriever, MemoryDoc

ANSWER = "Deploys need two reviewers [2], [9] and a green build [1][4]."
CLEANED = "Deploys need two reviewers [2] and a green build [1][4]."


def six_docs() -> InMemoryRetriever:
    return InMemoryRetriever(
        docs=[MemoryDoc(title=f"Deploy doc {n}", uri=f"https://wiki.example/deploy-{n}", text=f"deploy rule {n}")
              for n in range(1, 7)]
    )


async def test_done_and_history_keep_the_cleaned_answer_and_the_log_names_what_went(
    db: Database, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(db, openai_emulator.base_url, retriever=six_docs())
    openai_emulator.script(Text(ANSWER, chunk_chars=7), Text("Yes."))
    with caplog.at_level(logging.INFO, logger="core.run_endings"):
        events = [event async for event in engine.ask(request("deploy rule?", channel="C-cite"))]
    assert "".join(e.text for e in events if isinstance(e, AnswerDelta)) == ANSWER  # streamed as written
    [sources] = [e for e in events if isinstance(e, Sources)]
    assert len(sources.items) == 6
    assert isinstance(events[-1], Done) and events[-1].answer == CLEANED
    [line] = [r for r in caplog.records if "removed citations" in r.getMessage()]
    assert "[9]" in line.getMessage() and getattr(line, "removed") == [9]

    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT m.content FROM messages m JOIN conversations c ON c.id = m.conversation_id"
            " WHERE c.channel = 'C-cite' AND m.role = 'assistant' ORDER BY m.id"
        )
        assert [row[0] for row in await cursor.fetchall()] == [CLEANED]
    # The next turn's history carries the cleaned answer too.
    [event async for event in engine.ask(request("sure?", channel="C-cite"))]
    history = [m.get("content") for m in openai_emulator.chat_requests[-1]["messages"] if m["role"] == "assistant"]
    assert history == [CLEANED]


async def test_answer_gives_the_citations_in_the_answers_numbering(db: Database, openai_emulator: OpenAIEmulator) -> None:
    engine = make_engine(db, openai_emulator.base_url, retriever=six_docs())
    openai_emulator.script(Text(ANSWER))
    result = await engine.answer(request("deploy rule?", channel="C-answer"))
    assert result.final_answer == CLEANED and len(result.sources) == 6
    assert [(c.number, c.item.uri) for c in result.citations] == [
        (1, result.sources[0].uri), (2, result.sources[1].uri), (4, result.sources[3].uri)
    ]
