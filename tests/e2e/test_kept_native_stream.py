"""A kept final whose part was being streamed natively when its process died, the stream started but never stopped
(so it carries no metadata): the next process's delivery must finish that stream, not post the part beside it (issue
20; the fault sweep's slack seed 805, a crash at the chat.stopStream that was to give an unseen start its metadata),
and must leave alone a stream that is not this part's."""

from __future__ import annotations

import time

import pytest

from adapters.slack.controls import answer_content, run_of
from adapters.slack.surface import ReplyTarget, SlackFinalDelivery
from core.ports import FinalPart, PendingFinal
from core.store.db import Database
from core.store.pending_finals import PendingFinals
from tests.e2e.slack_harness import SlackBot, bot_replies, start_bot
from tests.emulators.openai_server import OpenAIEmulator
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000KEPTNATIVE"
FIRST = "The first part of the answer, posted and recorded."
SECOND = "The second part streamed natively, then the rest of it that the stream never got."
RUN = "0f0e0d0c-0b0a-4098-8765-4321fedcba98"  # a run id, as the buttons carry it


async def died_streaming(db: Database, bot: SlackBot, slack: SlackEmulator, streamed: str) -> tuple[str, str]:
    """A thread whose answer's first part is posted (with its run's Stop) and whose second part's post was
    attempted by a process that then died, leaving the outbox a native stream showing `streamed`, started after the
    attempt and never stopped. Returns the thread and the stream's ts."""
    thread = slack.add_user_message(CHANNEL, "a question", "U0000ALICE", None)
    target = ReplyTarget(team_id=slack.team_id, channel=CHANNEL, thread_ts=thread)
    first = await bot.adapter.surfaces.post_paced(target, key="answer-native-kept:0", **answer_content(FIRST, stop=RUN))
    at = time.time()
    started = await bot.adapter.surfaces.web.once(
        slack.team_id, "chat.startStream", channel=CHANNEL, thread_ts=thread, markdown_text=streamed,
        recipient_user_id="U0000ALICE", recipient_team_id=slack.team_id,
    )
    await PendingFinals(db, owner="died-streaming").keep(PendingFinal(
        answer_id="answer-native-kept", platform="slack", workspace=slack.team_id, channel=CHANNEL, thread=thread,
        parts=(FinalPart(text=FIRST, message_id=str(first["ts"])), FinalPart(text=SECOND)),
    ), attempted={1: at})
    async with db.connection() as conn:
        await conn.execute("UPDATE pending_finals SET owner = '' WHERE answer_id = 'answer-native-kept'")
    return thread, str(started["ts"])


async def test_a_kept_parts_native_stream_left_unstopped_is_finished_not_posted_beside(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, feedback_buttons=True)
    try:
        thread, stream = await died_streaming(db, bot, slack, "The second part streamed natively")
        delivery = SlackFinalDelivery(bot.adapter.surfaces)
        assert await bot.adapter.runner.deliver_pending(delivery, finder=delivery) == 1
        replies = bot_replies(slack, CHANNEL, thread)
        assert [m.text for m in replies] == [FIRST, SECOND], "each part once, whole"
        last = replies[-1]
        assert last.ts == stream and last.stream is not None and last.stream.stopped, "the stream itself, ended"
        assert run_of({"blocks": last.blocks}) == RUN, "the last part gets its run's 👍/👎, as every final does"
    finally:
        await bot.stop()


@pytest.mark.parametrize("streamed", ["Another answer's start, in the same thread", ""])
async def test_a_stream_that_does_not_show_the_parts_start_is_not_taken_for_it(
    streamed: str, db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, feedback_buttons=True)
    try:
        thread, stream = await died_streaming(db, bot, slack, streamed)
        delivery = SlackFinalDelivery(bot.adapter.surfaces)
        assert await bot.adapter.runner.deliver_pending(delivery, finder=delivery) == 1
        replies = bot_replies(slack, CHANNEL, thread)
        assert [m.text for m in replies] == [FIRST, streamed, SECOND], "the other stream left as it is, the part posted"
        other = replies[1]
        assert other.ts == stream and other.stream is not None and not other.stream.stopped
    finally:
        await bot.stop()
