"""Reminders fire exactly once, even with two bot instances armed for the same row."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from core.reminders import ReminderService
from core.requests import ConversationKey
from core.store.db import Database
from core.tools import ToolContext, ToolServices
from core.tools.registry import ToolError
from core.tools.reminders import CREATE_REMINDER, parse_when

KEY = ConversationKey(platform="test", workspace="W", channel="C", thread="t1")


class RecordingNotifier:
    def __init__(self) -> None:
        self.reminders: list[tuple[ConversationKey, str, str]] = []

    async def approval_expired(self, *, continuation_id: str, message_refs: list[dict[str, Any]]) -> None:
        raise AssertionError("not expected")

    async def deliver_reminder(self, *, conversation: ConversationKey, user: str, text: str) -> None:
        self.reminders.append((conversation, user, text))


async def _wait_until(predicate, timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)


async def test_due_reminder_fires_once_with_two_instances(db: Database) -> None:
    notifier = RecordingNotifier()
    schedulers = [AsyncIOScheduler(timezone=timezone.utc) for _ in range(2)]
    services = [ReminderService(db, s, {"test": notifier}, instance=f"i{n}") for n, s in enumerate(schedulers)]
    for scheduler in schedulers:
        scheduler.start()
    try:
        reminder = await services[0].create(
            conversation=KEY, user_id="U1", text="stand-up", due_at=datetime.now(timezone.utc) + timedelta(seconds=0.3)
        )
        services[1].arm(reminder.id, reminder.due_at)  # the other instance re-armed it from the table
        await _wait_until(lambda: notifier.reminders)
        await asyncio.sleep(0.3)
        assert await services[1].sweep() == 0
        assert notifier.reminders == [(KEY, "U1", "stand-up")]
    finally:
        for scheduler in schedulers:
            scheduler.shutdown(wait=False)


async def test_rearm_all_picks_up_pending_rows(db: Database) -> None:
    notifier = RecordingNotifier()
    scheduler = AsyncIOScheduler(timezone=timezone.utc)
    service = ReminderService(db, scheduler, {"test": notifier})
    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO reminders (platform, workspace, channel, thread, user_id, text, due_at)"
            " VALUES ('test', 'W', 'C', 't1', 'U2', 'left over', now() - interval '1 minute')"
        )
    scheduler.start()
    try:
        assert await service.rearm_all() >= 1
        await _wait_until(lambda: any(text == "left over" for _, _, text in notifier.reminders))
        assert [text for _, _, text in notifier.reminders].count("left over") == 1
    finally:
        scheduler.shutdown(wait=False)


async def test_create_reminder_tool_needs_approval_and_parses_time(db: Database) -> None:
    assert CREATE_REMINDER.requires_approval
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert parse_when("in 30 minutes", now=now) == now + timedelta(minutes=30)
    assert parse_when("2026-01-02T09:00:00", now=now) == datetime(2026, 1, 2, 9, tzinfo=timezone.utc)
    with pytest.raises(ToolError):
        parse_when("next blue moon", now=now)
    scheduler = AsyncIOScheduler(timezone=timezone.utc)
    service = ReminderService(db, scheduler, {})
    ctx = ToolContext(user="U1", conversation_id=None, conversation=KEY, services=ToolServices(reminders=service))
    output = await CREATE_REMINDER.run(ctx, {"text": "ship it", "when": "in 2 hours"})
    assert output.startswith("Reminder set for")


async def test_a_process_fires_only_the_reminders_of_the_platforms_it_serves(db: Database) -> None:
    slack_only = RecordingNotifier()
    scheduler = AsyncIOScheduler(timezone=timezone.utc)
    service = ReminderService(db, scheduler, {"slack": slack_only}, instance="slack-process")
    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO reminders (platform, workspace, channel, thread, user_id, text, due_at) VALUES"
            " ('discord', 'G', 'c', '', 'U3', 'for discord', now() - interval '1 minute'),"
            " ('slack', 'T', 'C', '', 'U4', 'for slack', now() - interval '1 minute')"
        )
    assert await service.sweep() == 1
    assert [text for _, _, text in slack_only.reminders] == ["for slack"]
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT status FROM reminders WHERE text = 'for discord'")
        assert await cursor.fetchone() == ("pending",), "left for a process that serves Discord, not marked failed"
