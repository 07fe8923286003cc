"""A Slack answer is one message (issue 22), end to end with real Bolt on the Slack and OpenAI emulators: a sign at
once (the thread's status, else 👀 on the question), Stop on the message being written, 👍/👎 on the final one —
no message of their own in the thread — and both buttons still work, in another process or after a restart."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from adapters import wording
from adapters.slack.working import LOADING_MESSAGES, REACTION
from core.store.db import Database
from core.store.feedback import FeedbackStore
from tests.e2e.slack_harness import ALICE, BOB, bot_replies, dm, eventually, mention, start_bot
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator
from tests.emulators.slack.limits import CallFault

pytestmark = pytest.mark.timeout(90)

CHANNEL = "C0000ONEMS"
DM_CHANNEL = "D0000ONEMS"
ANSWER = "Deploys need two reviewers and a green build."
STORY = "word " * 3000  # a minute of streaming: only a stop ends it early


def elements(message: Any, block_type: str) -> list[dict[str, Any]]:
    return [e for b in message.blocks or [] if b.get("type") == block_type for e in b.get("elements") or []]


def stop_button(message: Any) -> dict[str, Any] | None:
    return next((e for e in elements(message, "actions") if e.get("action_id") == "relaybot_stop"), None)


def feedback_of(message: Any) -> dict[str, Any] | None:
    return next((e for e in elements(message, "context_actions") if e.get("type") == "feedback_buttons"), None)


def calls_of(slack: SlackEmulator, method: str) -> list[Any]:
    return [c for c in slack.calls if c.method == method]


async def test_the_status_shows_at_once_in_the_thread_before_any_text_and_costs_no_post(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    # No placeholder message: the model's first words take 1.5 s, and only the status shows meanwhile.
    bot = await start_bot(db, slack, openai_emulator.base_url, stream_placeholder_after_s=30.0)
    try:
        openai_emulator.script(Text(ANSWER, chunk_chars=100, delay_s=1.5))
        event = mention(slack, CHANNEL, "what do deploys need?")
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: slack.status_shown(CHANNEL, event["ts"]) is not None)
        assert bot_replies(slack, CHANNEL, event["ts"]) == [], "the status came before any message"
        shown = slack.status_shown(CHANNEL, event["ts"])
        assert shown is not None and shown.status == wording.assistant_thinking()
        assert shown.loading_messages == LOADING_MESSAGES
        assert await eventually(lambda: [m.text for m in bot_replies(slack, CHANNEL, event["ts"])] == [ANSWER])
        assert await eventually(lambda: bot.adapter.inflight_answers == 0)
        # The reply took the status away (Slack clears it when the app answers): no call to clear it.
        assert slack.status_shown(CHANNEL, event["ts"]) is None
        assert [s.status for s in slack.statuses] == [wording.assistant_thinking()]
        names = slack.call_names()
        assert names.index("assistant.threads.setStatus") < names.index("chat.postMessage")
        assert len(calls_of(slack, "chat.postMessage")) == 1, "one post: the answer"
        assert not calls_of(slack, "reactions.add")
    finally:
        await bot.stop()


async def test_without_the_status_the_question_gets_eyes_until_the_answer_ends(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    slack.refuse("assistant.threads.setStatus", "missing_scope")
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        openai_emulator.script(Text(ANSWER, chunk_chars=100, delay_s=1.0), Text(ANSWER, chunk_chars=100, delay_s=1.0))
        first = mention(slack, CHANNEL, "what do deploys need?")
        await slack.deliver_event(bot.url, first)
        assert await eventually(lambda: slack.reactions_on(CHANNEL, first["ts"]) == {REACTION: [slack.bot_user_id]})
        assert await eventually(lambda: [m.text for m in bot_replies(slack, CHANNEL, first["ts"])] == [ANSWER])
        assert await eventually(lambda: slack.reactions_on(CHANNEL, first["ts"]) == {})
        # The workspace refused the status: the next answer goes straight to the reaction.
        second = mention(slack, CHANNEL, "and again?")
        await slack.deliver_event(bot.url, second)
        assert await eventually(lambda: [m.text for m in bot_replies(slack, CHANNEL, second["ts"])] == [ANSWER])
        assert await eventually(lambda: len(calls_of(slack, "reactions.remove")) == 2)
        assert len(calls_of(slack, "assistant.threads.setStatus")) == 1
        assert slack.reactions_on(CHANNEL, second["ts"]) == {}
    finally:
        await bot.stop()


async def test_a_top_level_dm_answer_gets_eyes_on_the_question_and_a_failed_sign_costs_nothing(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        openai_emulator.script(Text(ANSWER, chunk_chars=100, delay_s=1.0), Text(ANSWER))
        asked = dm(slack, DM_CHANNEL, "what do deploys need?")
        await slack.deliver_event(bot.url, asked)
        # A DM's top level has no thread for a status: 👀 on the question.
        assert await eventually(lambda: slack.reactions_on(DM_CHANNEL, asked["ts"]) == {REACTION: [slack.bot_user_id]})
        assert await eventually(lambda: ANSWER in [m.text for m in slack.messages(DM_CHANNEL) if m.is_bot])
        assert await eventually(lambda: slack.reactions_on(DM_CHANNEL, asked["ts"]) == {})
        assert not calls_of(slack, "assistant.threads.setStatus")
        # Reactions refused too: no sign at all, and the answer all the same.
        slack.refuse("reactions.add", "missing_scope")
        again = dm(slack, DM_CHANNEL, "once more?")
        await slack.deliver_event(bot.url, again)
        assert await eventually(lambda: [m.text for m in slack.messages(DM_CHANNEL) if m.is_bot].count(ANSWER) == 2)
    finally:
        await bot.stop()


async def test_stop_rides_the_answer_and_stops_it_with_no_message_of_its_own(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, feedback_buttons=True)
    try:
        openai_emulator.script(Text(STORY, chunk_chars=5, delay_s=0.02))
        event = mention(slack, CHANNEL, "tell me a long story", user=ALICE)
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: any(stop_button(m) for m in bot_replies(slack, CHANNEL, event["ts"])))
        [answer] = bot_replies(slack, CHANNEL, event["ts"])
        button = stop_button(answer)
        assert button is not None and "word" in answer.text
        assert answer.blocks[0] == {"type": "markdown", "text": answer.text}, "the text stays Slack-rendered Markdown"

        def click(user: str) -> dict[str, Any]:
            return slack.block_actions(CHANNEL, answer.ts, user=user, action_id="relaybot_stop", value=button["value"])

        await slack.deliver_interaction(bot.url, click(BOB))
        assert await eventually(lambda: any(e.user == BOB and "can stop this answer" in e.text for e in slack.ephemerals))
        await slack.deliver_interaction(bot.url, click(ALICE))
        assert await eventually(lambda: slack.message(CHANNEL, answer.ts).text.endswith("⏹ Stopped by u0000alice."))
        stopped = slack.message(CHANNEL, answer.ts)
        assert stop_button(stopped) is None and feedback_of(stopped) is None, "a stopped answer has no buttons"
        assert [m.ts for m in bot_replies(slack, CHANNEL, event["ts"])] == [answer.ts], "one message in the thread"
        assert len(calls_of(slack, "chat.postMessage")) == 1 and not calls_of(slack, "chat.delete")
        await slack.deliver_interaction(bot.url, click(ALICE))
        assert await eventually(lambda: any(e.user == ALICE and "already finished" in e.text for e in slack.ephemerals))
    finally:
        await bot.stop()


async def test_feedback_rides_the_final_message_and_votes_land_after_a_restart(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, feedback_buttons=True)
    openai_emulator.script(Text(ANSWER, chunk_chars=5, delay_s=0.05))
    event = mention(slack, CHANNEL, "what do deploys need?")
    try:
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: any(feedback_of(m) for m in bot_replies(slack, CHANNEL, event["ts"])))
        assert await eventually(lambda: bot.adapter.inflight_answers == 0)
    finally:
        await bot.stop()
    [answer] = bot_replies(slack, CHANNEL, event["ts"])
    assert answer.text == ANSWER and stop_button(answer) is None
    assert answer.blocks[0] == {"type": "markdown", "text": ANSWER}
    # One post (which carried Stop while it was written) and its edits: the buttons cost no call of their own.
    [post] = calls_of(slack, "chat.postMessage")
    assert "relaybot_stop" in json.dumps(post.params)

    restarted = await start_bot(db, slack, openai_emulator.base_url, feedback_buttons=True)
    try:
        await slack.deliver_interaction(restarted.url, slack.feedback_click(CHANNEL, answer.ts, user=ALICE, positive=True))
        assert await eventually(lambda: any(e.user == ALICE and "Thanks for the 👍" in e.text for e in slack.ephemerals))
        for _ in range(200):
            if [(r.user_id, r.vote) for r in await FeedbackStore(db).export()] == [(ALICE, 1)]:
                break
            await asyncio.sleep(0.02)
        assert [(r.user_id, r.vote) for r in await FeedbackStore(db).export()] == [(ALICE, 1)]
    finally:
        await restarted.stop()


async def test_a_long_answer_has_feedback_on_its_last_message_only_and_stop_on_the_one_being_written(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, feedback_buttons=True)
    long_answer = " ".join(f"w{i}" for i in range(1500))  # about 7,400 characters: more than one message
    try:
        openai_emulator.script(Text(long_answer, chunk_chars=40, delay_s=0.005))
        event = mention(slack, CHANNEL, "write a lot")
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: len(bot_replies(slack, CHANNEL, event["ts"])) >= 2
                                and bot.adapter.inflight_answers == 0, limit_s=40)
        replies = bot_replies(slack, CHANNEL, event["ts"])
        assert " ".join(m.text for m in replies).split() == long_answer.split()
        *earlier, last = replies
        assert feedback_of(last) is not None and all(feedback_of(m) is None for m in earlier)
        assert all(stop_button(m) is None for m in replies)
        # The message being written carried Stop (the first was posted live); each lost it when it was sealed. A
        # part first posted with the final text (the model outran the stream) carries no Stop.
        posts = calls_of(slack, "chat.postMessage")
        assert len(posts) == len(replies) and "relaybot_stop" in json.dumps(posts[0].params)
        assert not any("relaybot_stop" in json.dumps(p.params) and "relaybot_feedback" in json.dumps(p.params) for p in posts)
    finally:
        await bot.stop()


async def test_without_feedback_buttons_the_final_text_carries_no_buttons(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, feedback_buttons=False)
    try:
        openai_emulator.script(Text(STORY[:2000], chunk_chars=5, delay_s=0.01))
        event = mention(slack, CHANNEL, "a medium story")
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: any(stop_button(m) for m in bot_replies(slack, CHANNEL, event["ts"])))
        assert await eventually(lambda: bot.adapter.inflight_answers == 0, limit_s=30)
        [answer] = bot_replies(slack, CHANNEL, event["ts"])
        # Sent whole once it had a button: its Markdown alone, as a markdown block.
        assert answer.text.strip() == STORY[:2000].strip() and answer.markdown
        assert answer.blocks == [{"type": "markdown", "text": answer.text}]
    finally:
        await bot.stop()


async def test_a_final_the_outbox_delivers_drops_stop_and_carries_feedback(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, feedback_buttons=True, shutdown_grace_s=0.0)
    answer = "Rotate the keys on Monday, then tell the on-call channel it is done."
    openai_emulator.script(Text(answer, chunk_chars=6, delay_s=0.15))
    event = mention(slack, CHANNEL, "what is the key rotation plan?")
    try:
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: any(stop_button(m) for m in bot_replies(slack, CHANNEL, event["ts"])))
        slack.fail_next("chat.update", times=1000, retry_after_s=600)  # the final text cannot land
        async def kept() -> bool:
            async with db.connection() as conn:
                cursor = await conn.execute("SELECT 1 FROM pending_finals WHERE channel = %s", (CHANNEL,))
                return bool(await cursor.fetchall())
        for _ in range(300):
            if await kept():
                break
            await asyncio.sleep(0.02)
        assert await kept()
        await bot.adapter.interrupt_inflight()
    finally:
        await bot.stop()
    [shown] = bot_replies(slack, CHANNEL, event["ts"])
    run_id = stop_button(shown)["value"]  # type: ignore[index]

    slack.clear_faults()
    restarted = await start_bot(db, slack, openai_emulator.base_url, feedback_buttons=True)
    try:
        assert await eventually(lambda: slack.message(CHANNEL, shown.ts).text == answer)
        delivered = slack.message(CHANNEL, shown.ts)
        assert stop_button(delivered) is None
        feedback = feedback_of(delivered)
        assert feedback is not None and feedback["positive_button"]["value"] == f"up:{run_id}"
        assert [m.ts for m in bot_replies(slack, CHANNEL, event["ts"])] == [shown.ts]
    finally:
        await restarted.stop()



async def test_a_status_call_that_hangs_holds_neither_the_answer_nor_its_end(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    # Slack does the work and answers only after 16 s (past every wait below): the answer goes on beside it, and ends without it.
    slack.fault_plan = lambda method, params: (
        CallFault(kind="slow_reply", delay_s=16.0) if method == "assistant.threads.setStatus" else None
    )
    bot = await start_bot(db, slack, openai_emulator.base_url, feedback_buttons=True)
    try:
        openai_emulator.script(Text(ANSWER, chunk_chars=5, delay_s=0.02))
        event = mention(slack, CHANNEL, "what do deploys need?")
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: any(feedback_of(m) for m in bot_replies(slack, CHANNEL, event["ts"])))
        assert [m.text for m in bot_replies(slack, CHANNEL, event["ts"])] == [ANSWER]
        assert await eventually(lambda: bot.adapter.inflight_answers == 0, limit_s=10)
    finally:
        slack.fault_plan = None
        await bot.stop()
