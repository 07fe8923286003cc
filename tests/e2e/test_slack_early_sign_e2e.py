"""A Slack question's first sign goes up while its event is being recorded, not after (issue 22), end to end with real
Bolt and Postgres on the Slack and OpenAI emulators: the status reaches Slack before the event's dedup row commits,
one per answer, and every event that ends without an answer takes its sign down (the record fails, a duplicate, a
listener that never runs, shutdown); a retry and a refused DM keep today's order (a retry's sign after its record)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest

from adapters import wording
from adapters.slack.working import REACTION
from core.store.db import Database
from tests.e2e.slack_harness import ALICE, SlackBot, bot_replies, dm, eventually, mention, start_bot
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator, app_mention_event
from tests.support.outage import DatabaseOutage

pytestmark = pytest.mark.timeout(90)

CHANNEL = "C0000EARLY"
DM_CHANNEL = "D0000EARLY"
ANSWER = "Deploys need two reviewers and a green build."
# The gate gives a record 2 s (adapters/gate.py RECORD_TIMEOUT_S) before it counts the database as down: a held
# record is released well before, and the early status is looked for within this long of the delivery.
HOLD_LOOK_S = 1.2


@asynccontextmanager
async def records_held(database_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """processed_events locked from a connection of the test's own: every event's dedup INSERT waits (reads do not)
    until the block ends; the connection is given for reading the table meanwhile."""
    conn = await psycopg.AsyncConnection.connect(database_url)
    try:
        await conn.execute("LOCK TABLE processed_events IN EXCLUSIVE MODE")
        yield conn
    finally:
        await conn.rollback()
        await conn.close()


async def recorded(conn: psycopg.AsyncConnection[Any], event_id: str) -> bool:
    cursor = await conn.execute("SELECT count(*) FROM processed_events WHERE event_id = %s", (event_id,))
    row = await cursor.fetchone()
    return bool(row and row[0])


async def insert_waiting(conn: psycopg.AsyncConnection[Any]) -> bool:
    """A dedup INSERT is waiting for the test's lock (a record is under way)."""
    cursor = await conn.execute(
        "SELECT count(*) FROM pg_locks WHERE relation = 'processed_events'::regclass AND NOT granted"
    )
    row = await cursor.fetchone()
    return bool(row and row[0])


async def eventually_async(check: Any, *, limit_s: float) -> bool:
    deadline = asyncio.get_running_loop().time() + limit_s
    while asyncio.get_running_loop().time() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.02)
    return bool(await check())


def set_statuses(slack: SlackEmulator, channel: str, thread_ts: str) -> list[str]:
    """Every setStatus the thread got, in order ("" clears it)."""
    return [s.status for s in slack.statuses if s.channel == channel and s.thread_ts == thread_ts]


def calls_of(slack: SlackEmulator, method: str) -> list[Any]:
    return [c for c in slack.calls if c.method == method]


async def test_the_status_reaches_slack_before_the_events_record_commits_one_per_answer(
    db: Database, database_url: str, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, stream_placeholder_after_s=30.0)
    try:
        openai_emulator.script(*[Text(ANSWER, chunk_chars=100, delay_s=0.3) for _ in range(3)])
        events = [mention(slack, CHANNEL, f"what do deploys need, {n}?") for n in range(3)]
        async with records_held(database_url) as conn:
            deliveries = [asyncio.create_task(slack.deliver_event(bot.url, event, event_id=f"EvEARLY{n}"))
                          for n, event in enumerate(events)]
            # Every question's status is in its thread while no record of theirs can commit.
            assert await eventually(lambda: all(slack.status_shown(CHANNEL, e["ts"]) for e in events), limit_s=HOLD_LOOK_S)
            assert not any([await recorded(conn, f"EvEARLY{n}") for n in range(3)]), "the records are still held"
            assert not any(d.done() for d in deliveries), "not acked before the record"
        assert [(await d).status for d in deliveries] == [200, 200, 200]
        for event in events:
            assert await eventually(lambda: [m.text for m in bot_replies(slack, CHANNEL, event["ts"])] == [ANSWER])
        assert await eventually(lambda: bot.adapter.inflight_answers == 0)
        for event in events:
            # One status per answer, taken away by the reply (no clear, no second status).
            assert set_statuses(slack, CHANNEL, event["ts"]) == [wording.assistant_thinking()]
            assert slack.status_shown(CHANNEL, event["ts"]) is None
        assert len(bot.adapter.inbound.early_signs) == 0
    finally:
        await bot.stop()


async def test_a_question_whose_record_fails_takes_its_sign_down_before_the_refusal_and_is_not_answered(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, outage: DatabaseOutage
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        asked = mention(slack, CHANNEL, "are you there?")
        direct = dm(slack, DM_CHANNEL, "and here?")
        await outage.down()
        refused = await slack.deliver_event(bot.url, asked)
        refused_dm = await slack.deliver_event(bot.url, direct)
        assert (refused.status, refused_dm.status) == (503, 503), "not acked: Slack redelivers"
        # Shown at once, and down by the time Slack hears the 503: nothing left up while nobody answers.
        assert set_statuses(slack, CHANNEL, asked["ts"]) == [wording.assistant_thinking(), ""]
        assert slack.status_shown(CHANNEL, asked["ts"]) is None
        assert len(calls_of(slack, "reactions.add")) == 1 and len(calls_of(slack, "reactions.remove")) == 1
        assert slack.reactions_on(DM_CHANNEL, direct["ts"]) == {}
        assert bot_replies(slack, CHANNEL, asked["ts"]) == []
        assert openai_emulator.chat_requests == []
        assert len(bot.adapter.inbound.early_signs) == 0
    finally:
        await outage.up()
        await bot.stop()


async def test_a_retry_shows_its_sign_only_after_its_record(
    db: Database, database_url: str, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, stream_placeholder_after_s=30.0)
    try:
        openai_emulator.script(Text(ANSWER, chunk_chars=100, delay_s=0.3), Text(ANSWER, chunk_chars=100, delay_s=0.3))
        retried = mention(slack, CHANNEL, "asked before?")
        first = mention(slack, CHANNEL, "asked now?")
        async with records_held(database_url) as conn:
            retry = asyncio.create_task(slack.deliver_event(bot.url, retried, event_id="EvRETRY", retry_num=1))
            # The retry's record is under way (its INSERT waits): an early sign would have gone up before it.
            assert await eventually_async(lambda: insert_waiting(conn), limit_s=HOLD_LOOK_S)
            delivery = asyncio.create_task(slack.deliver_event(bot.url, first, event_id="EvFIRST"))
            assert await eventually(lambda: slack.status_shown(CHANNEL, first["ts"]) is not None, limit_s=HOLD_LOOK_S)
            # The first delivery, asked after, shows its status; the retry (maybe of an answered event) does not yet.
            assert set_statuses(slack, CHANNEL, retried["ts"]) == []
        assert ((await retry).status, (await delivery).status) == (200, 200)
        # Recorded and new: its listener shows the status, and answers.
        assert await eventually(lambda: [m.text for m in bot_replies(slack, CHANNEL, retried["ts"])] == [ANSWER])
        assert set_statuses(slack, CHANNEL, retried["ts"]) == [wording.assistant_thinking()]
        assert await eventually(lambda: [m.text for m in bot_replies(slack, CHANNEL, first["ts"])] == [ANSWER])
    finally:
        await bot.stop()


async def test_a_dm_refused_by_access_shows_no_sign(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, direct_messages="closed")
    try:
        top = dm(slack, DM_CHANNEL, "may I?")
        await slack.deliver_event(bot.url, top)
        root = dm(slack, DM_CHANNEL, "a thread")
        in_thread = dm(slack, DM_CHANNEL, "and in a thread?", thread_ts=root["ts"])
        await slack.deliver_event(bot.url, in_thread)
        refusal = wording.direct_messages_off()
        assert await eventually(lambda: [m.text for m in slack.messages(DM_CHANNEL) if m.is_bot] == [refusal, refusal])
        assert [m.text for m in bot_replies(slack, DM_CHANNEL, root["ts"])] == [refusal]
        assert not calls_of(slack, "reactions.add") and not calls_of(slack, "assistant.threads.setStatus")
        assert openai_emulator.chat_requests == []
        assert len(bot.adapter.inbound.early_signs) == 0
    finally:
        await bot.stop()


async def test_two_first_deliveries_of_one_event_at_once_show_one_sign_and_one_answer(
    db: Database, database_url: str, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, stream_placeholder_after_s=30.0)
    try:
        openai_emulator.script(Text(ANSWER, chunk_chars=100, delay_s=0.3), Text("a second answer"))
        asked = mention(slack, CHANNEL, "twice?")
        envelope = slack.event_envelope(asked, event_id="EvTWICE")
        async with records_held(database_url):
            both = [asyncio.create_task(slack.deliver_envelope(bot.url, envelope)) for _ in range(2)]
            assert await eventually(lambda: slack.status_shown(CHANNEL, asked["ts"]) is not None, limit_s=HOLD_LOOK_S)
        assert [(await d).status for d in both] == [200, 200]
        assert await eventually(lambda: [m.text for m in bot_replies(slack, CHANNEL, asked["ts"])] == [ANSWER])
        assert await eventually(lambda: bot.adapter.inflight_answers == 0)
        # One status for the two deliveries, never cleared under the answer, taken away by its reply.
        assert set_statuses(slack, CHANNEL, asked["ts"]) == [wording.assistant_thinking()]
        assert slack.status_shown(CHANNEL, asked["ts"]) is None
        assert len(openai_emulator.chat_requests) == 1
        assert len(bot.adapter.inbound.early_signs) == 0
    finally:
        await bot.stop()


async def test_a_duplicate_first_delivery_of_an_answered_event_takes_its_sign_down(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        openai_emulator.script(Text(ANSWER), Text("a second answer"))
        asked = dm(slack, DM_CHANNEL, "once?")
        envelope = slack.event_envelope(asked, event_id="EvAGAIN")
        assert (await slack.deliver_envelope(bot.url, envelope)).status == 200
        assert await eventually(lambda: ANSWER in [m.text for m in slack.messages(DM_CHANNEL) if m.is_bot])
        assert await eventually(lambda: slack.reactions_on(DM_CHANNEL, asked["ts"]) == {})
        # Delivered again as new (no retry number): the record says taken, and its 👀 is gone by the ack.
        assert (await slack.deliver_envelope(bot.url, envelope)).status == 200
        assert len(calls_of(slack, "reactions.add")) == 2
        assert len(calls_of(slack, "reactions.remove")) == 2
        assert slack.reactions_on(DM_CHANNEL, asked["ts"]) == {}
        assert len(openai_emulator.chat_requests) == 1
        assert len(bot.adapter.inbound.early_signs) == 0
    finally:
        await bot.stop()


async def test_a_sign_whose_listener_never_runs_comes_down(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        bot.adapter.inbound.early_signs.take_within_s = 0.3

        async def broken(body: dict[str, Any], next: Any) -> None:  # a Bolt middleware after the gate fails the event
            raise RuntimeError("a middleware failed")

        bot.adapter.app.middleware(broken)
        asked = mention(slack, CHANNEL, "anyone?")
        await slack.deliver_event(bot.url, asked)
        assert await eventually(lambda: set_statuses(slack, CHANNEL, asked["ts"]) == [wording.assistant_thinking(), ""])
        assert slack.status_shown(CHANNEL, asked["ts"]) is None
        assert len(bot.adapter.inbound.early_signs) == 0
        assert openai_emulator.chat_requests == []
    finally:
        await bot.stop()


async def test_shutdown_takes_down_a_sign_whose_record_is_still_held(
    db: Database, database_url: str, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot: SlackBot | None = await start_bot(db, slack, openai_emulator.base_url)
    assert bot is not None
    try:
        asked = dm(slack, DM_CHANNEL, "still there?")
        # The database hangs through the shutdown: the record never ends (the gate gives up on it: 503).
        async with records_held(database_url):
            delivery = asyncio.create_task(slack.deliver_event(bot.url, asked))
            assert await eventually(lambda: slack.reactions_on(DM_CHANNEL, asked["ts"]) == {REACTION: [slack.bot_user_id]},
                                    limit_s=HOLD_LOOK_S)
            stopping, bot = bot, None
            await stopping.adapter.stop_accepting()
            await stopping.adapter.close()
            # Down at close, before the record ended: no 👀 left on a question this process will not answer.
            assert slack.reactions_on(DM_CHANNEL, asked["ts"]) == {}
            assert len(stopping.adapter.inbound.early_signs) == 0
            assert (await delivery).status == 503
        await stopping.http.stop()
        assert slack.reactions_on(DM_CHANNEL, asked["ts"]) == {}
        assert openai_emulator.chat_requests == []
    finally:
        if bot is not None:
            await bot.stop()


async def test_past_the_bound_a_questions_sign_goes_up_after_its_record_as_before(
    db: Database, database_url: str, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, stream_placeholder_after_s=30.0)
    try:
        bot.adapter.inbound.early_signs.max_signs = 1
        openai_emulator.script(Text(ANSWER, chunk_chars=100, delay_s=0.3), Text(ANSWER, chunk_chars=100, delay_s=0.3))
        first, second = mention(slack, CHANNEL, "first?"), mention(slack, CHANNEL, "second?")
        async with records_held(database_url):
            deliveries = [asyncio.create_task(slack.deliver_event(bot.url, first))]
            assert await eventually(lambda: slack.status_shown(CHANNEL, first["ts"]) is not None, limit_s=HOLD_LOOK_S)
            # The map is full (the first's sign waits for its listener): the second's record starts without one.
            deliveries.append(asyncio.create_task(slack.deliver_event(bot.url, second)))
            await asyncio.sleep(0.3)  # room for a wrong early sign to reach the emulator (the first's took ms)
            assert set_statuses(slack, CHANNEL, second["ts"]) == []
            assert len(bot.adapter.inbound.early_signs) == 1
        assert [(await d).status for d in deliveries] == [200, 200]
        for event in (first, second):
            assert await eventually(lambda: [m.text for m in bot_replies(slack, CHANNEL, event["ts"])] == [ANSWER])
            assert set_statuses(slack, CHANNEL, event["ts"]) == [wording.assistant_thinking()]
        assert len(bot.adapter.inbound.early_signs) == 0
    finally:
        await bot.stop()


async def test_a_question_gets_its_sign_before_bolts_dispatch_only_once_its_signature_verifies(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    # The sign goes up as the request is read, before Bolt's middleware (adapters/slack/adapter.py _handle_http): a
    # request signed with another secret, or one from a workspace the bot does not serve, puts up nothing.
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, slack_team_ids=slack.team_id)
    try:
        forged = mention(slack, CHANNEL, "signed by someone else")
        delivery = await slack.deliver_event(bot.url, forged, signing_secret="not-the-apps-secret")
        assert delivery.status == 401
        other = slack.add_team("T0000ELSEWH")
        slack.add_channel("C0000ELSEWH", name="elsewhere", team_id=other.team_id)
        elsewhere = app_mention_event(text=f"<@{other.bot_user_id}> from a workspace not served", user=ALICE,
                                      channel="C0000ELSEWH", ts="1700000000.000100", team_id=other.team_id)
        assert (await slack.deliver_event(bot.url, elsewhere, team_id=other.team_id)).status == 200
        await asyncio.sleep(0.3)
        assert not calls_of(slack, "reactions.add") and not calls_of(slack, "assistant.threads.setStatus")
        assert len(bot.adapter.inbound.early_signs) == 0 and openai_emulator.chat_requests == []
        # A question signed with the app's secret gets its sign ahead, kept by its record, taken by its answer.
        openai_emulator.script(Text(ANSWER))
        asked = mention(slack, CHANNEL, "signed by Slack")
        await slack.deliver_event(bot.url, asked)
        assert await eventually(lambda: [m.text for m in bot_replies(slack, CHANNEL, asked["ts"])] == [ANSWER])
        assert len(calls_of(slack, "assistant.threads.setStatus")) == 1
    finally:
        await bot.stop()
