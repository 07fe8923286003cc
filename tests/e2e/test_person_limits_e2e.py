"""Per-person daily limits on running Slack and Discord bots (issue 27): a person past their limit reads one sentence
saying when it resets, others are answered; a small token limit holds however many questions run at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from adapters.answer_repair import CURSOR_CHAR
from core.person_limits import person_ledger
from core.store.db import Database
from tests.adapters.discord.harness import make_world, running_bot, wait_for_text
from tests.e2e.slack_harness import BOB, bot_replies, eventually, mention, start_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(90)

CHANNEL = "C0000GENRL"
LIMIT_SENTENCE = "⚠️ You have reached your limit of {n} {what} for today; it resets at midnight UTC ("
TOKENS = 50


def _last_reply(slack: SlackEmulator, ts: str) -> str:
    replies = bot_replies(slack, CHANNEL, ts)
    return replies[-1].text if replies else ""


async def test_slack_a_person_over_the_request_limit_gets_the_sentence_and_others_are_answered(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    openai_emulator.script_fn(lambda body: Text("Answered."))
    bot = await start_bot(db, slack, openai_emulator.base_url, user_requests_per_day=2)
    try:
        asked = [mention(slack, CHANNEL, f"question {n}") for n in range(3)]
        for event in asked:
            await slack.deliver_event(bot.url, event)
            # Ended, not still streaming: the next question must not overtake this one's last edit.
            assert await eventually(lambda: _last_reply(slack, event["ts"]) != ""
                                    and CURSOR_CHAR not in _last_reply(slack, event["ts"]))
        assert [_last_reply(slack, event["ts"]) for event in asked[:2]] == ["Answered.", "Answered."]
        assert _last_reply(slack, asked[2]["ts"]).startswith(LIMIT_SENTENCE.format(n=2, what="questions"))
        assert len(openai_emulator.chat_requests) == 2  # the refused question never reached the model
        other = mention(slack, CHANNEL, "my first question", user=BOB)
        await slack.deliver_event(bot.url, other)
        assert await eventually(lambda: _last_reply(slack, other["ts"]) == "Answered.")
    finally:
        await bot.stop()


async def test_slack_twelve_concurrent_questions_on_a_fifty_token_person_settle_within_it(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    # As tests/e2e/test_api_token_quota.py for a key: a prompt small enough that a 50-token day holds an answer.
    slack = slack_emulator
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Answer briefly.", encoding="utf-8")
    openai_emulator.script_fn(lambda body: Text("Within it."))
    bot = await start_bot(db, slack, openai_emulator.base_url, user_tokens_per_day=TOKENS, system_prompt_file=prompt,
                          llm_model_overrides={"supports_tools": False})
    try:
        asked = [mention(slack, CHANNEL, f"q{n}", user="U0000TWELVE") for n in range(12)]
        await asyncio.gather(*(slack.deliver_event(bot.url, event) for event in asked))
        assert await eventually(lambda: all(_last_reply(slack, event["ts"]) for event in asked), limit_s=30)
        replies = [_last_reply(slack, event["ts"]) for event in asked]
        refused = [text for text in replies if text.startswith(LIMIT_SENTENCE.format(n=TOKENS, what="tokens"))]
        assert replies.count("Within it.") >= 1 and len(refused) >= 1 and len(refused) + replies.count("Within it.") == 12
        # Every call the model saw was told to stop within what was left of the person's day…
        assert all(0 < request["max_tokens"] <= TOKENS for request in openai_emulator.chat_requests)
        # …and the day, settled with the usage the model reported, never passed the limit.
        _, settled = await person_ledger(db).used(f"slack:{slack.team_id}:U0000TWELVE")
        async with db.connection() as conn:
            cursor = await conn.execute(
                "SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) FROM token_usage WHERE user_id = %s",
                ("U0000TWELVE",),
            )
            (reported,) = await cursor.fetchone()  # type: ignore[misc]
        assert settled == reported and 0 < settled <= TOKENS, (settled, reported, replies)
    finally:
        await bot.stop()


async def test_discord_a_person_over_the_request_limit_gets_the_sentence_and_others_are_answered(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script_fn(lambda body: Text("Answered."))
    async with running_bot(dc, db, openai_emulator, user_requests_per_day=1):
        first = await dc.send_user_message(w.channel_id, w.alice, "question one", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(first), what="thread")
        await wait_for_text(dc, thread.id, "Answered.")
        second = await dc.send_user_message(w.channel_id, w.alice, "question two", mentions_bot=True)
        refused = await dc.wait_for(lambda: dc.thread_of(second), what="thread")
        [sentence] = await dc.wait_for(
            lambda: [m for m in dc.messages(refused.id) if m.author_id == dc.bot_user_id and m.content.startswith("⚠️")],
            what="the limit's sentence",
        )
        assert sentence.content.startswith(LIMIT_SENTENCE.format(n=1, what="questions"))
        other = await dc.send_user_message(w.channel_id, w.bob, "bob's question", mentions_bot=True)
        answered = await dc.wait_for(lambda: dc.thread_of(other), what="thread")
        await wait_for_text(dc, answered.id, "Answered.")
    assert len(openai_emulator.chat_requests) == 2


async def test_discord_twelve_concurrent_questions_on_a_fifty_token_person_settle_within_it(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Answer briefly.", encoding="utf-8")
    openai_emulator.script_fn(lambda body: Text("Within it."))
    async with running_bot(dc, db, openai_emulator, user_tokens_per_day=TOKENS, system_prompt_file=prompt,
                           llm_model_overrides={"supports_tools": False}):
        asked = await asyncio.gather(*(
            dc.send_user_message(w.channel_id, w.alice, f"q{n}", mentions_bot=True) for n in range(12)
        ))
        threads = [await dc.wait_for(lambda: dc.thread_of(message), what="thread") for message in asked]

        def replies() -> list[str]:
            return [next((m.content for m in dc.messages(t.id) if m.author_id == dc.bot_user_id
                          and (m.content == "Within it." or m.content.startswith("⚠️"))), "") for t in threads]

        assert await eventually(lambda: all(replies()), limit_s=30), replies()
    shown = replies()
    refused = [text for text in shown if text.startswith(LIMIT_SENTENCE.format(n=TOKENS, what="tokens"))]
    assert shown.count("Within it.") >= 1 and len(refused) >= 1 and len(refused) + shown.count("Within it.") == 12
    assert all(0 < request["max_tokens"] <= TOKENS for request in openai_emulator.chat_requests)
    _, settled = await person_ledger(db).used(f"discord:{w.guild_id}:{w.alice}")
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) FROM token_usage WHERE user_id = %s",
            (str(w.alice),),
        )
        (reported,) = await cursor.fetchone()  # type: ignore[misc]
    assert settled == reported and 0 < settled <= TOKENS, (settled, reported, shown)
