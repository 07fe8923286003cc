"""`relaybot feedback` exports every vote with its comment beside the question, answer and sources, since a moment,
as a table, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bot.feedback_cli import render
from core.requests import ConversationKey
from core.store.conversations import ConversationStore, NewMessage
from core.store.db import Database
from core.store.feedback import FeedbackRow, FeedbackStore
from tests.bot.test_usage_cli import relaybot

SOURCE = {"title": "Deploy guide", "uri": "https://docs.example.com/deploy", "text": "…", "source": "docs"}


async def turn(db: Database, question: str, answer: str, sources: list[dict[str, str]] | None = None) -> str:
    conversations = ConversationStore(db)
    conversation = await conversations.get_or_create(ConversationKey(platform="slack", workspace="T1", channel="C-cli"))
    turn_id = uuid.uuid4()
    await conversations.append(conversation, turn_id, [
        NewMessage(role="user", content=question), NewMessage(role="assistant", content=answer, sources=sources),
    ])
    return str(turn_id)


async def test_the_command_exports_votes_with_their_turns_since_a_moment(db: Database, database_url: str, tmp_path: Path) -> None:
    store = FeedbackStore(db)
    deploy = await turn(db, "How do I deploy?", "Run make deploy [1].", [SOURCE])
    lunch = await turn(db, "Lunch?", "Noon.")
    await store.vote(deploy, user_id="U1", user_name="ada", platform="slack", up=False)
    await store.comment(deploy, user_id="U1", user_name="ada", platform="slack", text="Says nothing about staging, sadly.")
    await store.vote(lunch, user_id="42", user_name="bob", platform="discord", up=True)
    async with db.connection() as conn:
        await conn.execute("UPDATE feedback SET updated_at = %s WHERE turn_id = %s",
                           (datetime.now(timezone.utc) - timedelta(days=3), uuid.UUID(lunch)))

    code, out, err = await relaybot("feedback", "--format", "json", database_url=database_url, cwd=tmp_path)
    assert code == 0, err
    records = json.loads(out)
    assert [(r["question"], r["vote"]) for r in records] == [("Lunch?", "up"), ("How do I deploy?", "down")]
    ada = records[1]
    assert {k: ada[k] for k in ("platform", "user_id", "user_name", "comment", "answer", "sources", "turn_id")} == {
        "platform": "slack", "user_id": "U1", "user_name": "ada", "comment": "Says nothing about staging, sadly.",
        "answer": "Run make deploy [1].", "sources": [{"title": "Deploy guide", "uri": "https://docs.example.com/deploy"}],
        "turn_id": deploy,
    }

    code, out, err = await relaybot("feedback", "--since", "1d", "--format", "csv", database_url=database_url, cwd=tmp_path)
    assert code == 0, err
    [row] = list(csv.DictReader(io.StringIO(out)))
    assert (row["user_name"], row["vote"], row["comment"], row["question"]) == (
        "ada", "down", "Says nothing about staging, sadly.", "How do I deploy?")
    assert row["sources"] == "Deploy guide <https://docs.example.com/deploy>"

    code, out, err = await relaybot("feedback", "--since", "2026-01-01", database_url=database_url, cwd=tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["at", "platform", "user_name", "vote", "comment", "question", "answer", "sources"]
    assert len(lines) == 3 and "ada" in lines[2] and "Says nothing about staging" in lines[2]


async def test_a_bad_since_is_a_usage_error(database_url: str, tmp_path: Path) -> None:
    code, out, err = await relaybot("feedback", "--since", "last week-ish", database_url=database_url, cwd=tmp_path)
    assert code == 2 and out == "" and "is not a date" in err


def test_formats_with_nothing_and_long_texts() -> None:
    assert render([], output="table") == "No feedback recorded.\n"
    assert render([], output="csv") == "at,platform,workspace,user_id,user_name,vote,comment,question,answer,sources,turn_id\n"
    assert render([], output="json") == "[]\n"
    row = FeedbackRow(
        turn_id="t", platform="slack", user_id="U1", user_name="ada", vote=1, comment="", at=datetime(2026, 3, 1, tzinfo=timezone.utc),
        question="q", answer="word " * 100, sources=[],
    )
    table = render([row], output="table").splitlines()
    assert table[1].endswith("…") or "…" in table[1]
    assert json.loads(render([row], output="json"))[0]["answer"] == "word " * 100  # JSON keeps texts whole
