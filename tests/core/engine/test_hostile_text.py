"""Hostile text through the engine and the real Postgres: NUL and lone surrogates from any door are stored, questions
are capped (issue 21: what the fuzz suite found)."""

from __future__ import annotations

import dataclasses

from core.events import ApprovalRequired, Failed
from core.requests import Actor, Attachment, ClientTool, ConversationKey, Request
from core.retrieval.search import PgRetriever
from core.store.conversations import ConversationStore, StoredMessage
from core.store.db import Database
from core.text_safety import QUESTION_MAX_CHARS
from tests.core.engine.support import RecordingTool, events_of, last_done, last_failed, registry_with
from tests.emulators.openai_server import Call, Fault, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine


def _ask(question: str, channel: str, **fields: object) -> Request:
    return Request(question=question, conversation=ConversationKey(platform="test", workspace="W", channel=channel),
                   user=Actor(id="U1", name="Ada"), **fields)  # type: ignore[arg-type]


async def _stored(db: Database, channel: str) -> list[StoredMessage]:
    store = ConversationStore(db)
    conversation = await store.find(ConversationKey(platform="test", workspace="W", channel=channel))
    assert conversation is not None
    return await store.history(conversation)


async def test_a_question_with_nul_is_answered_and_stored_without_it(db: Database, openai_emulator: OpenAIEmulator) -> None:
    # The fuzz suite's biggest finding: ~750 tracebacks and the 5xx, from the prefetch search and the store.
    engine = make_engine(db, openai_emulator.base_url, retriever=PgRetriever(db, None))
    openai_emulator.script(Text("Answered."))
    events = await events_of(engine, _ask("status\x00 of the\x00 deploy?", "C-nul"))
    assert last_done(events).answer == "Answered."
    assert openai_emulator.chat_requests[-1]["messages"][-1]["content"] == "status of the deploy?"
    assert [(m.role, m.content) for m in await _stored(db, "C-nul")] == [
        ("user", "status of the deploy?"), ("assistant", "Answered.")]


async def test_a_lone_surrogate_becomes_a_replacement_character(db: Database, openai_emulator: OpenAIEmulator) -> None:
    # Slack's and Discord's JSON may carry "\ud800"; UTF-8 cannot encode it, so psycopg raised UnicodeEncodeError.
    engine = make_engine(db, openai_emulator.base_url, retriever=PgRetriever(db, None))
    openai_emulator.script(Text("Seen."))
    events = await events_of(engine, _ask("bad \ud800 text \udfff\ud83d and a pair \ud83d\ude00", "C-surrogate"))
    assert last_done(events).answer == "Seen."
    stored = await _stored(db, "C-surrogate")
    assert stored[0].content == "bad \ufffd text \ufffd\ufffd and a pair \U0001f600"


async def test_the_question_of_a_failed_run_is_stored_whatever_its_text(db: Database, openai_emulator: OpenAIEmulator) -> None:
    # runs._store_failed → history.store_question raised UnicodeEncodeError (not a psycopg.Error): a traceback.
    engine = make_engine(db, openai_emulator.base_url)
    openai_emulator.script(Fault("500"), Fault("500"), Fault("500"))
    events = await events_of(engine, _ask("failing \ud800 question\x00", "C-failed"))
    assert isinstance(last_failed(events), Failed)
    assert [(m.role, m.content) for m in await _stored(db, "C-failed")] == [("user", "failing \ufffd question")]


async def test_a_tool_result_and_the_models_words_with_nul_are_stored(db: Database, openai_emulator: OpenAIEmulator) -> None:
    # A page, a row or an MCP answer with NUL failed store_turn (DataError) after the answer was shown.
    tool = RecordingTool(output="rows:\x00 none\ud800")
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    openai_emulator.script(ToolCalls([Call("deploy", '{"env": "prod\\u0000"}')]), Text("Done\x00 \ud800."))
    events = await events_of(engine, _ask("deploy please", "C-tool"))
    assert last_done(events).answer == "Done \ufffd."
    stored = await _stored(db, "C-tool")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[2].content == "rows: none\ufffd prod"
    assert stored[3].content == "Done \ufffd."
    sent = openai_emulator.chat_requests[-1]["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": sent[-2]["tool_calls"][0]["id"], "content": "rows: none\ufffd prod"}


async def test_an_attached_file_with_nul_bytes_is_read_and_stored(db: Database, openai_emulator: OpenAIEmulator) -> None:
    engine = make_engine(db, openai_emulator.base_url)
    openai_emulator.script(Text("Read it."))
    file = Attachment(filename="log\x00.txt", content_type="text/plain", data=b"line one\x00\nline two\xed\xa0\x80")
    events = await events_of(engine, _ask("what is in the file?", "C-file", attachments=(file,)))
    assert last_done(events).answer == "Read it."
    question = (await _stored(db, "C-file"))[0].content
    assert "\x00" not in question and "Attached file log.txt" in question and "line one\nline two" in question


async def test_a_question_over_the_cap_is_cut_with_a_sentence_once(db: Database, openai_emulator: OpenAIEmulator) -> None:
    engine = make_engine(db, openai_emulator.base_url)
    openai_emulator.script(Text("Long."))
    request = _ask("word " * 30_000, "C-long")
    assert dataclasses.replace(request, agent_type="classic").question == request.question  # cut once, not again
    events = await events_of(engine, request)
    assert last_done(events).answer == "Long."
    sent = openai_emulator.chat_requests[-1]["messages"][-1]["content"]
    assert sent.startswith("word " * 100) and len(sent) < QUESTION_MAX_CHARS + 200
    assert sent.endswith("it is 150,000 characters long and only the first 40,000 are read.]")
    assert (await _stored(db, "C-long"))[0].content == sent


async def test_search_takes_a_query_with_nul_and_surrogates(db: Database) -> None:
    # internal_search's query is the model's: the door of the search itself.
    assert await PgRetriever(db, None).search("deploy\x00 status \ud800", limit=3) == []


async def test_a_client_tool_with_nul_in_its_description_and_schema_pauses(db: Database, openai_emulator: OpenAIEmulator) -> None:
    # The paused run's state keeps the client's tools (jsonb, which takes no NUL) to offer them again on resume.
    engine = make_engine(db, openai_emulator.base_url)
    tool = ClientTool(name="lookup", description="Looks\x00 up", parameters={
        "type": "object", "properties": {"key": {"type": "string", "description": "the\x00 key \ud800"}}})
    openai_emulator.script(ToolCalls([Call("lookup", '{"key": "k"}')]))
    events = await events_of(engine, _ask("look it up", "C-client", client_tools=(tool,)))
    assert isinstance(events[-1], ApprovalRequired), events[-1]
    [offered] = [tool["function"] for tool in openai_emulator.chat_requests[-1]["tools"]
                 if tool["function"]["name"] == "lookup"]
    assert offered["description"] == "Looks up"
    assert offered["parameters"]["properties"]["key"]["description"] == "the key \ufffd"
