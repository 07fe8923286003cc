"""The Discord adapter end to end: real discord.py, the Discord and OpenAI emulators, Postgres."""

from __future__ import annotations

import asyncio

from core.store.db import Database
from tests.adapters.discord.harness import (
    DeployTool,
    approval_message,
    bot_messages,
    button_ids,
    make_world,
    running_bot,
    wait_for_text,
)
from tests.emulators.discord import DiscordEmulator, RateLimitConfig, UploadedFile
from tests.emulators.openai_server import Call, Fault, OpenAIEmulator, Text, ToolCalls

ANSWER = "Paris is the capital of France. It sits on the Seine."


def user_texts(request: dict) -> list[str]:
    return [str(m.get("content")) for m in request["messages"] if m["role"] in ("user", "assistant")]


async def test_mention_opens_thread_and_streams_the_answer(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text(ANSWER, chunk_chars=4, delay_s=0.01))
    async with running_bot(dc, db, openai_emulator):
        asked = await dc.send_user_message(w.channel_id, w.alice, "what is the capital of France?", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        [answer] = await wait_for_text(dc, thread.id, ANSWER)
    assert thread.parent_id == w.channel_id and "capital of France" in thread.name
    assert answer.edit_count >= 1 and answer.history[0] != ANSWER
    assert answer.allowed_mentions is not None and answer.allowed_mentions["parse"] == []
    assert not bot_messages(dc, w.channel_id)  # nothing posted in the channel itself
    assert "what is the capital of France?" in user_texts(openai_emulator.chat_requests[-1])[-1]


async def test_dm_is_answered_in_place_as_one_rolling_conversation(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("First answer."), Text("Second answer."))
    async with running_bot(dc, db, openai_emulator):
        await dc.send_dm(w.alice, "first question", attachments=[UploadedFile(filename="notes.txt", data=b"secret plan")])
        dm = dc.dm_channel_id(w.alice)
        await wait_for_text(dc, dm, "First answer.")
        await dc.send_dm(w.alice, "second question")
        await wait_for_text(dc, dm, "First answer.Second answer.")
    first, second = openai_emulator.chat_requests
    assert "secret plan" in user_texts(first)[-1]
    assert any("First answer." in text for text in user_texts(second))
    assert not dc.threads


async def test_slash_ask_defers_then_streams_into_the_response(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text(ANSWER, chunk_chars=6, delay_s=0.01))
    async with running_bot(dc, db, openai_emulator):
        assert [c["name"] for c in dc.commands()] == ["ask"]
        interaction_id = await dc.invoke_slash("ask", {"question": "capital?"}, w.alice, w.channel_id)
        await wait_for_text(dc, w.channel_id, ANSWER)
    responses = dc.interaction_responses(interaction_id)
    assert responses[0].kind == "callback" and responses[0].callback_type == 5
    assert {r.kind for r in responses[1:]} == {"edit_original"}
    assert responses[-1].content == ANSWER


async def test_thread_follow_ups_carry_the_earlier_turns(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("Answer one."), Text("Answer two."), Text("Answer three."))
    async with running_bot(dc, db, openai_emulator, discord_message_content_intent=True):
        asked = await dc.send_user_message(w.channel_id, w.alice, "question one", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        await wait_for_text(dc, thread.id, "Answer one.")
        await dc.send_user_message(thread.id, w.alice, "question two", mentions_bot=True)
        await wait_for_text(dc, thread.id, "Answer one.Answer two.")
        # With the message-content intent, a follow-up in the bot's thread needs no mention.
        await dc.send_user_message(thread.id, w.bob, "question three")
        await wait_for_text(dc, thread.id, "Answer one.Answer two.Answer three.")
    second, third = openai_emulator.chat_requests[1:]
    assert user_texts(second)[:2] == ["question one", "Answer one."]
    assert user_texts(third)[:4] == ["question one", "Answer one.", "question two", "Answer two."]


async def test_without_the_intent_unmentioned_thread_messages_are_ignored(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("Answer one."), Text("Answer two."))
    async with running_bot(dc, db, openai_emulator):
        asked = await dc.send_user_message(w.channel_id, w.alice, "question one", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        await wait_for_text(dc, thread.id, "Answer one.")
        await dc.send_user_message(thread.id, w.alice, "no mention here")
        await dc.send_user_message(w.channel_id, w.alice, "plain channel chatter")
        await dc.send_user_message(thread.id, w.alice, "now with mention", mentions_bot=True)
        await wait_for_text(dc, thread.id, "Answer one.Answer two.")
    assert len(openai_emulator.chat_requests) == 2


async def test_mention_in_an_unknown_thread_passes_its_earlier_messages(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("First."), Text("With context."))
    async with running_bot(dc, db, openai_emulator, discord_message_content_intent=True):
        # A thread the bot opened, then forgotten: its history is read from Discord.
        asked = await dc.send_user_message(w.channel_id, w.alice, "opening", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        await wait_for_text(dc, thread.id, "First.")
        await db_forget_conversations(db)
        await dc.send_user_message(thread.id, w.bob, "the build is red on main")
        await dc.send_user_message(thread.id, w.alice, "why is that?", mentions_bot=True)
        await wait_for_text(dc, thread.id, "First.With context.")
    request = openai_emulator.chat_requests[-1]
    assert any("the build is red on main" in str(m.get("content")) for m in request["messages"])


async def db_forget_conversations(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM conversations")


async def test_guilds_outside_the_allow_list_are_ignored(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    other_guild = dc.add_guild("Other")
    other_channel = dc.add_channel(other_guild, "random")
    openai_emulator.script(Text("Allowed."))
    async with running_bot(dc, db, openai_emulator, discord_guild_ids=(str(w.guild_id),)):
        ignored = await dc.send_user_message(other_channel, w.alice, "hello?", mentions_bot=True)
        asked = await dc.send_user_message(w.channel_id, w.alice, "hello!", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        await wait_for_text(dc, thread.id, "Allowed.")
    assert dc.thread_of(ignored) is None and not bot_messages(dc, other_channel)
    assert len(openai_emulator.chat_requests) == 1
