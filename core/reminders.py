"""Reminders: a Postgres row is the truth; apscheduler wakes us; firing claims the row, so it fires once."""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Mapping

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from core.notifier import Notifier
from core.requests import ConversationKey
from core.store.db import Database

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 10
# Each sweep arms a precise wake-up for reminders due before the sweep after next, so a reminder
# written by the create_reminder tool (which only stores the row) fires on time.
ARM_AHEAD_S = 2 * SWEEP_INTERVAL_S


@dataclass(frozen=True, kw_only=True)
class Reminder:
    id: int
    conversation: ConversationKey
    user_id: str
    text: str
    due_at: datetime


def instance_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


async def _insert(db: Database, *, conversation: ConversationKey, user_id: str, text: str, due_at: datetime) -> Reminder:
    async with db.connection() as conn:
        cursor = await conn.execute(
            "INSERT INTO reminders (platform, workspace, channel, thread, user_id, text, due_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (conversation.platform, conversation.workspace, conversation.channel, conversation.thread, user_id, text, due_at),
        )
        row = await cursor.fetchone()
    assert row is not None
    return Reminder(id=int(row[0]), conversation=conversation, user_id=user_id, text=text, due_at=due_at)


class ReminderBook:
    """Writes reminders for the create_reminder tool; whichever process serves the platform delivers them."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(self, *, conversation: ConversationKey, user_id: str, text: str, due_at: datetime) -> Reminder:
        return await _insert(self._db, conversation=conversation, user_id=user_id, text=text, due_at=due_at)


class ReminderService:
    """Arms in-memory wake-ups for the reminders of the platforms this process serves, and fires each once across instances."""

    def __init__(
        self, db: Database, scheduler: AsyncIOScheduler, notifiers: Mapping[str, Notifier], *, instance: str | None = None
    ) -> None:
        self._db = db
        self._scheduler = scheduler
        self._notifiers = dict(notifiers)
        self._platforms = sorted(self._notifiers)
        self.instance = instance or instance_name()

    async def create(self, *, conversation: ConversationKey, user_id: str, text: str, due_at: datetime) -> Reminder:
        reminder = await _insert(self._db, conversation=conversation, user_id=user_id, text=text, due_at=due_at)
        self.arm(reminder.id, due_at)
        return reminder

    def arm(self, reminder_id: int, due_at: datetime) -> None:
        """Schedule an in-memory wake-up; a past due time fires at once."""
        self._scheduler.add_job(
            self.fire,
            "date",
            run_date=max(due_at, datetime.now(timezone.utc)),
            args=[reminder_id],
            id=f"reminder-{reminder_id}",
            replace_existing=True,
            misfire_grace_time=None,
        )

    async def rearm_all(self) -> int:
        """At startup: arm every pending reminder of the platforms this process serves."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT id, due_at FROM reminders WHERE status = 'pending' AND platform = ANY(%s)", (self._platforms,)
            )
            rows = await cursor.fetchall()
        for reminder_id, due_at in rows:
            self.arm(int(reminder_id), due_at)
        return len(rows)

    async def sweep(self) -> int:
        """Fire due reminders nobody fired yet, and arm those due before the next sweeps; returns how many fired."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT id, due_at, due_at <= now() FROM reminders WHERE status = 'pending' AND platform = ANY(%s)"
                " AND due_at <= now() + make_interval(secs => %s)",
                (self._platforms, ARM_AHEAD_S),
            )
            rows = await cursor.fetchall()
        fired = 0
        for reminder_id, due_at, overdue in rows:
            if overdue:
                fired += await self.fire(int(reminder_id))
            else:
                self.arm(int(reminder_id), due_at)
        return fired

    async def fire(self, reminder_id: int) -> bool:
        """Claim the row with one conditional UPDATE; only the winner delivers."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "UPDATE reminders SET status = 'fired', fired_at = now(), fired_by = %s"
                " WHERE id = %s AND status = 'pending' AND due_at <= now()"
                " RETURNING platform, workspace, channel, thread, user_id, text, due_at",
                (self.instance, reminder_id),
            )
            row = await cursor.fetchone()
        if row is None:
            return False
        platform, workspace, channel, thread, user_id, text, _due = row
        notifier = self._notifiers.get(platform)
        conversation = ConversationKey(platform=platform, workspace=workspace, channel=channel, thread=thread)
        if notifier is None:
            log.warning("reminder %s is for %s, which this process does not serve", reminder_id, platform)
            await self._mark_failed(reminder_id)
            return False
        try:
            await notifier.deliver_reminder(conversation=conversation, user=user_id, text=text)
        except Exception:
            log.exception("could not deliver reminder %s", reminder_id)
            await self._mark_failed(reminder_id)
            return False
        return True

    async def _mark_failed(self, reminder_id: int) -> None:
        async with self._db.connection() as conn:
            await conn.execute("UPDATE reminders SET status = 'failed' WHERE id = %s", (reminder_id,))

