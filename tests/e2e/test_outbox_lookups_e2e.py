"""Kept finals and crash repair through the one door: a part is looked up only after a post whose outcome nobody saw,
from its attempt on (never paging whole threads), on the read budget; a 429 or an outage on the way is "later",
never "drop it"; a post whose reply was lost is not made twice."""

from __future__ import annotations

import time

import pytest

from adapters import wording
from adapters.slack.surface import ReplyTarget, SlackFinalDelivery, SlackShownMessages
from core.ports import FinalPart, LiveMessage, PendingFinal
from core.store.db import Database
from core.store.live_messages import LiveMessages
from core.store.pending_finals import PendingFinals
from tests.e2e.slack_harness import ALICE, SlackBot, bot_replies, start_bot
from tests.emulators.openai_server import OpenAIEmulator
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(60)

ANSWER = "The backup runs at 02:00 and keeps fourteen days."


async def kept_by_a_dead_process(
    db: Database, slack: SlackEmulator, channel: str, thread: str, *, answer_id: str, attempted_at: float | None = None,
) -> PendingFinal:
    """A final a process kept and handed over (it stopped), maybe after sending a post of its part 0 unseen."""
    final = PendingFinal(answer_id=answer_id, platform="slack", workspace=slack.team_id, channel=channel,
                         thread=thread, parts=(FinalPart(text=ANSWER),))
    gone = PendingFinals(db, owner=f"gone-{answer_id}")
    await gone.keep(final)
    if attempted_at is not None:
        assert await gone.attempting(answer_id, 0, at=attempted_at)
    await gone.release(answer_id)
    return final


async def rows(db: Database, answer_id: str) -> int:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM pending_finals WHERE answer_id = %s", (answer_id,))
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


def reads(slack: SlackEmulator, channel: str) -> list[dict[str, object]]:
    return [call.params for call in slack.calls if call.method == "conversations.replies" and call.params.get("channel") == channel]


async def deliver(bot: SlackBot) -> int:
    delivery = SlackFinalDelivery(bot.adapter.surfaces)
    return await bot.adapter.runner.deliver_pending(delivery, finder=delivery)


async def test_a_kept_final_is_delivered_after_a_429_on_its_look_up_not_dropped(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        channel = "C0000LOOK1"
        thread = slack.add_user_message(channel, "when is the backup?", ALICE, None)
        await kept_by_a_dead_process(db, slack, channel, thread, answer_id="look-429", attempted_at=time.time())
        slack.fail_next("conversations.replies", times=1, retry_after_s=1)
        assert await deliver(bot) == 1
        assert [m.text for m in bot_replies(slack, channel, thread)] == [ANSWER]
        assert slack.count_429.get("conversations.replies") == 1, "the look-up met its 429 and waited it out"
        assert await rows(db, "look-429") == 0
    finally:
        await bot.stop()


async def test_a_kept_final_nobody_attempted_is_posted_without_reading_the_thread(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        channel = "C0000LOOK2"
        thread = slack.add_user_message(channel, "when is the backup?", ALICE, None)
        await kept_by_a_dead_process(db, slack, channel, thread, answer_id="look-none")
        assert await deliver(bot) == 1
        assert [m.text for m in bot_replies(slack, channel, thread)] == [ANSWER]
        assert reads(slack, channel) == [], "no post was attempted: nothing to look up"
    finally:
        await bot.stop()


async def test_a_part_posted_after_199_replies_is_found_from_its_attempt_not_posted_again(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        channel = "C0000LOOK3"
        thread = slack.add_user_message(channel, "the long incident thread", ALICE, None)
        for n in range(250):
            slack.add_user_message(channel, f"update {n}", ALICE, thread)
        attempted = time.time()
        # The dead process's post arrived (its reply did not): part 0 is in the thread, past the first 200.
        await bot.adapter.surfaces.post_paced(
            ReplyTarget(team_id=slack.team_id, channel=channel, thread_ts=thread), key="look-long:0", markdown_text=ANSWER
        )
        await kept_by_a_dead_process(db, slack, channel, thread, answer_id="look-long", attempted_at=attempted)
        assert await deliver(bot) == 1
        assert [m.text for m in bot_replies(slack, channel, thread)] == [ANSWER], "found, not posted a second time"
        looked = reads(slack, channel)
        assert looked and all(attempted - 120 < float(str(read["oldest"])) < attempted for read in looked), \
            "read from just before the attempt (a skew margin), not from the thread's start"
    finally:
        await bot.stop()


async def test_on_the_limited_history_tier_a_look_up_reads_one_page_of_fifteen(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    slack.limit_history("limited")  # 1 conversations.replies a minute, 15 messages a page
    bot = await start_bot(db, slack, openai_emulator.base_url, slack_history_tier="limited")
    try:
        channel = "C0000LOOK4"
        thread = slack.add_user_message(channel, "a busy thread", ALICE, None)
        for n in range(40):
            slack.add_user_message(channel, f"reply {n}", ALICE, thread)
        attempted = time.time()
        await bot.adapter.surfaces.post_paced(
            ReplyTarget(team_id=slack.team_id, channel=channel, thread_ts=thread), key="look-tier:0", markdown_text=ANSWER
        )
        await kept_by_a_dead_process(db, slack, channel, thread, answer_id="look-tier", attempted_at=attempted)
        assert await deliver(bot) == 1
        assert [m.text for m in bot_replies(slack, channel, thread)] == [ANSWER]
        # The window starts a skew margin before the attempt (the replies here are that recent): pages of 15, paced.
        assert {int(str(read["limit"])) for read in reads(slack, channel)} == {15}
        assert slack.count_429.get("conversations.replies", 0) == 0
    finally:
        await bot.stop()


async def test_a_final_whose_delivery_fails_for_now_stays_kept_and_a_permanent_error_drops_it(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        channel = "C0000LOOK5"
        thread = slack.add_user_message(channel, "when is the backup?", ALICE, None)
        await kept_by_a_dead_process(db, slack, channel, thread, answer_id="look-later")
        # An error Slack does not document as final, many times over: "later", however often.
        slack.fail_next("chat.postMessage", error="something_new", times=50)
        assert await deliver(bot) == 0
        assert await rows(db, "look-later") == 1, "kept: only a documented permanent error gives a final up"
        slack.clear_faults()
        gone = "C0000GONE5"
        gone_thread = slack.add_user_message(gone, "a question", ALICE, None)
        await kept_by_a_dead_process(db, slack, gone, gone_thread, answer_id="look-gone")
        slack.remove_bot_from(gone)
        await deliver(bot)
        assert await rows(db, "look-gone") == 0, "not_in_channel is permanent: dropped"
        assert await rows(db, "look-later") == 1, "still waiting out its backoff"
    finally:
        await bot.stop()


async def test_a_final_older_than_the_outbox_max_age_is_dropped_with_an_error_line(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, outbox_max_age_s=3600)
    try:
        channel = "C0000LOOK6"
        thread = slack.add_user_message(channel, "an old question", ALICE, None)
        await kept_by_a_dead_process(db, slack, channel, thread, answer_id="look-old")
        async with db.connection() as conn:
            await conn.execute("UPDATE pending_finals SET created_at = now() - interval '2 hours' WHERE answer_id = 'look-old'")
        assert await deliver(bot) == 0
        assert await rows(db, "look-old") == 0 and bot_replies(slack, channel, thread) == []
        assert any(r.levelname == "ERROR" and "look-old" in r.getMessage() for r in caplog.records)
    finally:
        await bot.stop()


async def test_crash_repair_waits_out_a_429_and_an_outage_and_keeps_the_record_until_repaired(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        channel = "C0000LOOK7"
        thread = slack.add_user_message(channel, "a slow question", ALICE, None)
        posted = await bot.adapter.surfaces.post_paced(
            ReplyTarget(team_id=slack.team_id, channel=channel, thread_ts=thread), markdown_text="a slow a ▌"
        )
        message = LiveMessage(platform="slack", workspace=slack.team_id, channel=channel, message_id=str(posted["ts"]),
                              thread=thread)
        await LiveMessages(db, owner="crashed-7").add(message)
        async with db.connection() as conn:
            await conn.execute("UPDATE process_heartbeats SET seen_at = now() - interval '1 hour' WHERE owner = 'crashed-7'")
        shown = SlackShownMessages(bot.adapter.surfaces)
        # Slack is down for this round (more 5xx than one call's retries): nothing is given up.
        slack.fail_next("conversations.replies", error="service_unavailable", http_status=503, times=50)
        assert await bot.adapter.runner.repair_leftovers(shown) == 0
        assert slack.message(channel, message.message_id).text == "a slow a ▌"
        slack.clear_faults()
        slack.fail_next("conversations.replies", times=1, retry_after_s=1)  # then one 429 on the read
        assert await bot.adapter.runner.repair_leftovers(shown) == 1
        assert slack.message(channel, message.message_id).text == f"a slow a\n\n{wording.interrupted()}"
        assert await LiveMessages(db, owner="anyone-else").take_all("slack") == []
    finally:
        await bot.stop()


async def test_a_post_whose_reply_was_lost_is_found_not_made_twice(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        channel = "C0000LOOK8"
        thread = slack.add_user_message(channel, "a question", ALICE, None)
        slack.lose_reply_next("chat.postMessage")  # Slack posts it, the connection drops before the reply
        response = await bot.adapter.surfaces.post_paced(
            ReplyTarget(team_id=slack.team_id, channel=channel, thread_ts=thread), markdown_text="Sources: the runbook."
        )
        [shown] = bot_replies(slack, channel, thread)
        assert shown.text == "Sources: the runbook." and str(response["ts"]) == shown.ts
    finally:
        await bot.stop()


async def test_a_final_taken_over_stays_the_takers_the_old_owner_can_neither_post_nor_keep_it(db: Database) -> None:
    final = PendingFinal(answer_id="look-owned", platform="slack", workspace="T", channel="C0000LOOK9", thread="1.0",
                         parts=(FinalPart(text="the final"),))
    a, b = PendingFinals(db, owner="process-a"), PendingFinals(db, owner="process-b")
    await a.keep(final)
    assert await a.attempting("look-owned", 0)
    async with db.connection() as conn:  # a database failover: A's heartbeat went stale, A itself lives on
        await conn.execute("UPDATE process_heartbeats SET seen_at = now() - interval '1 hour' WHERE owner = 'process-a'")
    # Only this final matters here (the module's other tests may have left finals of their own to take).
    [taken] = [final for final in await b.take("slack") if final.answer_id == "look-owned"]
    assert 0 in await b.attempts("look-owned")
    assert not await a.attempting("look-owned", 0), "A must not post it: B delivers it now"
    await a.keep(PendingFinal(answer_id="look-owned", platform="slack", workspace="T", channel="C0000LOOK9",
                              thread="1.0", parts=(FinalPart(text="the final", message_id="9.9"),)))
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT owner, parts FROM pending_finals WHERE answer_id = 'look-owned'")
        row = await cursor.fetchone()
    assert row is not None and row[0] == "process-b" and row[1][0]["message_id"] is None
    assert await b.attempting("look-owned", 0)
