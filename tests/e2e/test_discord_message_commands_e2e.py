"""Discord's message commands end to end (issue 27, "Shortcuts on any message"): "Ask relaybot about this" answers
where the message is (or privately), "Summarise this thread" reads the thread through the conversation reader and
answers there; where the bot cannot read the channel it answers privately and says so."""

from __future__ import annotations

from adapters import wording
from adapters.discord.message_commands import ASK_ABOUT, ASK_PRIVATELY, SUMMARISE
from core.store.db import Database
from tests.adapters.discord.harness import World, bot_messages, make_world, running_bot
from tests.emulators.discord import DiscordEmulator, StoredMessage
from tests.emulators.openai_server import OpenAIEmulator, Text


def prompt(openai: OpenAIEmulator) -> str:
    return "\n".join(str(m.get("content")) for m in openai.chat_requests[-1]["messages"])


def privately_seen(dc: DiscordEmulator, channel_id: int, user_id: int) -> list[StoredMessage]:
    return [m for m in dc.messages_seen_by(channel_id, user_id) if m.author_id == dc.bot_user_id and m.ephemeral]


async def a_thread_with_a_question(dc: DiscordEmulator, w: World) -> tuple[int, int]:
    """A thread bob opened on his own message, with a reply; returns the thread and the reply asked about."""
    opening = await dc.send_user_message(w.channel_id, w.bob, "deploys to staging keep failing")
    thread = await dc.start_thread(opening, "staging deploys", by=w.bob)
    await dc.send_user_message(thread, w.bob, "it started after the runner upgrade on Tuesday")
    question = await dc.send_user_message(thread, w.bob, "why does the job exit with code 137?")
    return thread, question


async def test_ask_about_this_answers_in_the_thread_from_the_message_and_what_came_before_it(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("Exit 137 means the job ran out of memory."))
    async with running_bot(dc, db, openai_emulator, discord_message_content_intent=True):
        assert {ASK_ABOUT, ASK_PRIVATELY, SUMMARISE} <= {c["name"] for c in dc.commands() if c["type"] == 3}
        thread, question = await a_thread_with_a_question(dc, w)
        asked = await dc.invoke_message_command(ASK_ABOUT, question, w.alice)
        await dc.wait_for(
            lambda: [m.content for m in bot_messages(dc, thread)] == ["Exit 137 means the job ran out of memory."],
            what="the answer in the thread",
        )
    assert not dc.interaction_responses(asked)[0].ephemeral  # everyone in the thread sees it
    said = prompt(openai_emulator)
    assert "About this message from bob" in said and "why does the job exit with code 137?" in said
    assert "it started after the runner upgrade on Tuesday" in said  # the thread before it, as context
    assert bot_messages(dc, w.channel_id) == []


async def test_ask_relaybot_privately_answers_only_the_asker(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("It ran out of memory."))
    async with running_bot(dc, db, openai_emulator, discord_message_content_intent=True):
        thread, question = await a_thread_with_a_question(dc, w)
        await dc.invoke_message_command(ASK_PRIVATELY, question, w.alice)
        await dc.wait_for(
            lambda: [m.content for m in privately_seen(dc, thread, w.alice)] == ["It ran out of memory."],
            what="the private answer",
        )
    assert bot_messages(dc, thread) == [] and privately_seen(dc, thread, w.bob) == []
    assert "it started after the runner upgrade on Tuesday" in prompt(openai_emulator)


async def test_summarise_this_thread_reads_it_through_the_reader_and_answers_in_the_thread(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("Staging deploys fail since Tuesday's runner upgrade; exit 137."))
    async with running_bot(dc, db, openai_emulator, discord_message_content_intent=True):
        thread, question = await a_thread_with_a_question(dc, w)
        reads = len(dc.requests_to("message_list"))
        summarised = await dc.invoke_message_command(SUMMARISE, question, w.alice)
        await dc.wait_for(lambda: [m.content for m in bot_messages(dc, thread)] == [
            "Staging deploys fail since Tuesday's runner upgrade; exit 137."], what="the summary")
    assert len(dc.requests_to("message_list")) > reads  # read back from Discord
    said = prompt(openai_emulator)
    assert wording.summarise_request() in said
    assert "it started after the runner upgrade on Tuesday" in said and "why does the job exit with code 137?" in said
    assert not dc.interaction_responses(summarised)[0].ephemeral and privately_seen(dc, thread, w.alice) == []


async def test_where_the_bot_cannot_read_the_channel_it_answers_privately_and_says_so(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("From that message alone: check the memory limit."))
    async with running_bot(dc, db, openai_emulator, discord_message_content_intent=True):
        earlier = await dc.send_user_message(w.channel_id, w.bob, "the runner was upgraded on Tuesday")
        question = await dc.send_user_message(w.channel_id, w.bob, "why does the job exit with code 137?")
        # The bot loses View Channel / Read Message History here; people can still use its commands.
        dc.hide_channel_from_bot(w.channel_id)
        reads = len(dc.requests_to("message_list"))
        asked = await dc.invoke_message_command(ASK_ABOUT, question, w.alice)
        await dc.wait_for(lambda: privately_seen(dc, w.channel_id, w.alice)[-1:] and privately_seen(
            dc, w.channel_id, w.alice)[-1].content == "From that message alone: check the memory limit.", what="the answer")
        summarised = await dc.invoke_message_command(SUMMARISE, earlier, w.alice)
        await dc.wait_for(lambda: len(privately_seen(dc, w.channel_id, w.alice)) == 3, what="the refusal")
    sentence, answer, refusal = (m.content for m in privately_seen(dc, w.channel_id, w.alice))
    assert sentence == wording.cannot_read_here_answered_privately()
    assert answer == "From that message alone: check the memory limit."
    assert refusal == wording.cannot_read_here_to_summarise()
    assert dc.interaction_responses(asked)[0].ephemeral and dc.interaction_responses(summarised)[0].ephemeral
    assert len(openai_emulator.chat_requests) == 1  # the summary asked nothing of the model
    assert "the runner was upgraded on Tuesday" not in prompt(openai_emulator)
    assert len(dc.requests_to("message_list")) == reads
    assert bot_messages(dc, w.channel_id) == [] and privately_seen(dc, w.channel_id, w.bob) == []


async def test_without_the_message_content_intent_a_guild_message_is_answered_privately_from_itself_alone(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("Probably out of memory."))
    async with running_bot(dc, db, openai_emulator):
        await dc.send_user_message(w.channel_id, w.bob, "the runner was upgraded on Tuesday")
        question = await dc.send_user_message(w.channel_id, w.bob, "why does the job exit with code 137?")
        await dc.invoke_message_command(ASK_ABOUT, question, w.alice)
        await dc.wait_for(lambda: [m.content for m in privately_seen(dc, w.channel_id, w.alice)][1:] == [
            "Probably out of memory."], what="the private answer")
    sentence, answer = (m.content for m in privately_seen(dc, w.channel_id, w.alice))
    assert sentence == wording.cannot_read_here_answered_privately() and answer == "Probably out of memory."
    said = prompt(openai_emulator)
    assert "why does the job exit with code 137?" in said and "the runner was upgraded on Tuesday" not in said
    assert bot_messages(dc, w.channel_id) == []


async def test_summarise_on_the_message_a_thread_was_started_on_summarises_that_thread(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("The thread: deploys fail since Tuesday."))
    async with running_bot(dc, db, openai_emulator, discord_message_content_intent=True):
        await dc.send_user_message(w.channel_id, w.alice, "lunch at noon, anyone?")
        thread, _ = await a_thread_with_a_question(dc, w)
        # The message in the channel the thread was started on (the thread has its id).
        await dc.invoke_message_command(SUMMARISE, thread, w.alice)
        await dc.wait_for(
            lambda: [m.content for m in bot_messages(dc, w.channel_id)] == ["The thread: deploys fail since Tuesday."],
            what="the summary in the channel",
        )
    said = prompt(openai_emulator)
    assert "it started after the runner upgrade on Tuesday" in said and "lunch at noon" not in said
