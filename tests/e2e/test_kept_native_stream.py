"""A kept final whose part was being streamed natively when its process died, the stream started but never stopped
(so it carries no metadata): the next process's delivery must finish that stream, not post the part beside it (issue
20; the fault sweep's slack seed 805, a crash at the chat.stopStream that was to give an unseen start its metadata)."""

from __future__ import annotations

import time

import pytest

from adapters.slack.surface import ReplyTarget, SlackFinalDelivery
from core.ports import FinalPart, PendingFinal
from core.store.db import Database
from core.store.pending_finals import PendingFinals
from tests.e2e.slack_harness import bot_replies, start_bot
from tests.emulators.openai_server import OpenAIEmulator
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000KEPTNATIVE"
FIRST = "The first part of the answer, posted and recorded."
SECOND = "The second part streamed natively, then the rest of it that the stream never got."


@pytest.mark.xfail(strict=True, reason=(
    "SlackFinalDelivery.find_part (adapters/slack/surface.py, not this helper's file) finds a part by its metadata"
    " only; a native stream never stopped has none, so the part is posted again beside it and the stream stays"
    " cut short. It should also take, as SlackShownMessages.find_post does, the bot's message without metadata"
    " that no stream of this process is writing (and that shows the start of the part)."
))
async def test_a_kept_parts_native_stream_left_unstopped_is_finished_not_posted_beside(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        thread = slack.add_user_message(CHANNEL, "a question", "U0000ALICE", None)
        target = ReplyTarget(team_id=slack.team_id, channel=CHANNEL, thread_ts=thread)
        first = await bot.adapter.surfaces.transport(target).post(FIRST, key="answer-native-kept:0")
        at = time.time()
        await bot.adapter.surfaces.web.once(
            "chat.startStream", channel=CHANNEL, thread_ts=thread, markdown_text="The second part streamed natively",
            recipient_user_id="U0000ALICE", recipient_team_id=slack.team_id,
        )
        await PendingFinals(db, owner="died-streaming").keep(PendingFinal(
            answer_id="answer-native-kept", platform="slack", workspace=slack.team_id, channel=CHANNEL, thread=thread,
            parts=(FinalPart(text=FIRST, message_id=first), FinalPart(text=SECOND)),
        ), attempted={1: at})
        async with db.connection() as conn:
            await conn.execute("UPDATE pending_finals SET owner = '' WHERE answer_id = 'answer-native-kept'")
        delivery = SlackFinalDelivery(bot.adapter.surfaces)
        assert await bot.adapter.runner.deliver_pending(delivery, finder=delivery) == 1
        assert [m.text for m in bot_replies(slack, CHANNEL, thread)] == [FIRST, SECOND], "each part once, whole"
    finally:
        await bot.stop()
