"""Reminders against the Slack emulator: a Slack blip delays a reminder instead of failing it, and a claim left
by a process that died is delivered by the next live one — each reminder posted exactly once."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from core.reminders import ReminderService
from core.store.db import Database
from core.store.heartbeats import Heartbeats
from tests.e2e.slack_harness import ALICE, eventually, start_bot
from tests.emulators.openai_server import OpenAIEmulator
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(90)

CHANNEL = "C0REMIND"


def reminders_posted(slack: SlackEmulator, text: str) -> int:
    return sum(1 for m in slack.messages(CHANNEL) if m.is_bot and text in m.text)


async def _due_reminder(db: Database, slack: SlackEmulator, text: str, **claim: str) -> int:
    columns = ", ".join(("platform", "workspace", "channel", "thread", "user_id", "text", "due_at", *claim))
    marks = ", ".join(["%s"] * (7 + len(claim)))
    due = datetime.now(timezone.utc) - timedelta(seconds=1)
    async with db.connection() as conn:
        cursor = await conn.execute(
            f"INSERT INTO reminders ({columns}) VALUES ({marks}) RETURNING id",
            ("slack", slack.team_id, CHANNEL, "", ALICE, text, due, *claim.values()),
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def _status(db: Database, reminder_id: int) -> str:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT status FROM reminders WHERE id = %s", (reminder_id,))
        row = await cursor.fetchone()
    assert row is not None
    return str(row[0])


async def test_a_slack_blip_delays_a_reminder_and_it_is_posted_once(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("core.reminders.RETRY_FIRST_S", 0.2)
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    scheduler = AsyncIOScheduler(timezone=timezone.utc)
    scheduler.start()
    try:
        service = ReminderService(db, scheduler, {"slack": bot.adapter.notifier}, instance="blip-process")
        # Slack refuses the posts for a while: 500s (the transport retries those itself), then an error it
        # reports to the reminder (a bot removed from the channel and invited back a moment later).
        slack.fail_next("chat.postMessage", error="internal_error", http_status=500, times=3)
        slack.fail_next("chat.postMessage", error="not_in_channel", times=2)
        reminder_id = await _due_reminder(db, slack, "stand-up in 5")
        await service.sweep()
        assert await eventually(lambda: reminders_posted(slack, "stand-up in 5") == 1, limit_s=30.0)
        assert await eventually_status(db, reminder_id, "delivered")
        async with db.connection() as conn:
            cursor = await conn.execute("SELECT attempts FROM reminders WHERE id = %s", (reminder_id,))
            attempts = (await cursor.fetchone() or (0,))[0]
        assert attempts >= 1, "the failures reached the reminder, which tried again instead of giving up"
        await service.sweep()
        assert reminders_posted(slack, "stand-up in 5") == 1
    finally:
        scheduler.shutdown(wait=False)
        await bot.stop()


async def eventually_status(db: Database, reminder_id: int, status: str) -> bool:
    for _ in range(200):
        if await _status(db, reminder_id) == status:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_reminder_claimed_by_a_process_that_died_is_posted_once_by_the_next(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    scheduler = AsyncIOScheduler(timezone=timezone.utc)
    try:
        # Process A claimed the row and died before posting it (its heartbeat stopped 5 minutes ago).
        await Heartbeats(db, owner="process-a").beat()
        async with db.connection() as conn:
            await conn.execute("UPDATE process_heartbeats SET seen_at = now() - interval '5 minutes' WHERE owner = 'process-a'")
        reminder_id = await _due_reminder(db, slack, "take the bins out", status="fired", fired_by="process-a")
        survivor = ReminderService(db, scheduler, {"slack": bot.adapter.notifier}, instance="process-b")
        assert await survivor.sweep() == 1
        assert reminders_posted(slack, "take the bins out") == 1
        assert await _status(db, reminder_id) == "delivered"
        assert await survivor.sweep() == 0
        assert reminders_posted(slack, "take the bins out") == 1
    finally:
        await bot.stop()
