"""Reminders: a Postgres row is the truth; apscheduler wakes us; claim → record the attempt → deliver → mark delivered, exactly once."""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Mapping

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from core.notifier import ClaimLost, Notifier
from core.requests import ConversationKey
from core.store.db import Database
from core.store.heartbeats import STALE_AFTER_S

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 10
# Each sweep arms a precise wake-up for reminders due before the sweep after next, so a reminder
# written by the create_reminder tool (which only stores the row) fires on time.
ARM_AHEAD_S = 2 * SWEEP_INTERVAL_S
# A failed delivery is tried again after 5 s, 10 s, 20 s … (at most 2 minutes apart) until the grace.
RETRY_FIRST_S = 5.0
RETRY_MAX_S = 120.0
DEFAULT_RETRY_GRACE_S = 900.0

_STAMP = (
    "INSERT INTO process_heartbeats (owner, seen_at) VALUES (%s, now())"
    " ON CONFLICT (owner) DO UPDATE SET seen_at = now()"
)
# A claim whose process stopped beating (died, or stopped after the claim) may be taken over.
_CLAIM_ABANDONED = (
    "(r.status = 'fired' AND NOT EXISTS (SELECT 1 FROM process_heartbeats h WHERE h.owner = r.fired_by"
    " AND h.seen_at >= now() - make_interval(secs => %(stale_s)s)))"
)


@dataclass(frozen=True, kw_only=True)
class Reminder:
    id: int
    conversation: ConversationKey
    user_id: str
    text: str
    due_at: datetime


def instance_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def reminder_key(reminder_id: int) -> str:
    """What names a reminder's post on the platform (Slack metadata, a Discord nonce), for its look-up."""
    return f"reminder:{reminder_id}"


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
    """Arms in-memory wake-ups for the reminders of the platforms this process serves and delivers each once.

    Delivery has the outbox's guarantees: the row is claimed ('fired', by this process's heartbeat owner
    `instance`), its attempt recorded (`attempted_at`), delivered, then marked 'delivered'. A failed delivery
    goes back to 'pending' with a backoff until `retry_grace_s` after its due time; a claim whose process died
    is taken over. Every attempt after the first gives the notifier the first one's time, so a post the
    platform took (from a process that died before the mark, or a reply that never came) is found, not repeated.
    """

    def __init__(
        self, db: Database, scheduler: AsyncIOScheduler, notifiers: Mapping[str, Notifier], *, instance: str | None = None,
        retry_grace_s: float = DEFAULT_RETRY_GRACE_S, stale_after_s: float = STALE_AFTER_S,
    ) -> None:
        self._db = db
        self._scheduler = scheduler
        self._notifiers = dict(notifiers)
        self._platforms = sorted(self._notifiers)
        self.instance = instance or instance_name()
        self._retry_grace_s = retry_grace_s
        self._stale_after_s = stale_after_s
        # Claimed and being delivered by this process now: its own claims are resumed only when not here.
        self._delivering: set[int] = set()
        # Delivered, but the mark could not be written (the database went away): marked, never re-sent.
        self._unmarked: set[int] = set()

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
        """At startup: arm every pending reminder of the platforms this process serves (at its next attempt)."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT id, greatest(due_at, coalesce(next_attempt_at, due_at)) FROM reminders"
                " WHERE status = 'pending' AND platform = ANY(%s)", (self._platforms,)
            )
            rows = await cursor.fetchall()
        for reminder_id, at in rows:
            self.arm(int(reminder_id), at)
        return len(rows)

    async def sweep(self) -> int:
        """Fire due reminders nobody holds (pending, or claimed by a dead process, or this process's own stuck
        claims), and arm those due before the next sweeps; returns how many were delivered."""
        await self._mark_unmarked()
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT r.id, greatest(r.due_at, coalesce(r.next_attempt_at, r.due_at)) AS at,"
                " greatest(r.due_at, coalesce(r.next_attempt_at, r.due_at)) <= now() OR r.status = 'fired'"
                " FROM reminders r WHERE r.platform = ANY(%(platforms)s) AND r.due_at <= now() + make_interval(secs => %(ahead)s)"
                f" AND ((r.status = 'pending' AND coalesce(r.next_attempt_at, r.due_at) <= now() + make_interval(secs => %(ahead)s))"
                f"  OR (r.status = 'fired' AND r.fired_by = %(me)s) OR {_CLAIM_ABANDONED})",
                {"platforms": self._platforms, "ahead": ARM_AHEAD_S, "me": self.instance, "stale_s": self._stale_after_s},
            )
            rows = await cursor.fetchall()
        fired = 0
        for reminder_id, at, now_due in rows:
            if now_due:
                fired += await self.fire(int(reminder_id))
            else:
                self.arm(int(reminder_id), at)
        return fired

    async def fire(self, reminder_id: int) -> bool:
        """Claim the row with one conditional UPDATE, deliver, mark delivered; only the claim's holder delivers."""
        if reminder_id in self._delivering or reminder_id in self._unmarked:
            return False
        self._delivering.add(reminder_id)
        try:
            return await self._fire(reminder_id)
        finally:
            self._delivering.discard(reminder_id)

    async def _fire(self, reminder_id: int) -> bool:
        async with self._db.connection() as conn:
            # The claimer is alive by definition: its claim must not look abandoned to the next sweep.
            await conn.execute(_STAMP, (self.instance,))
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "UPDATE reminders r SET status = 'fired', fired_at = now(), fired_by = %(me)s"
                " WHERE r.id = %(id)s AND r.platform = ANY(%(platforms)s) AND r.due_at <= now()"
                "  AND ((r.status = 'pending' AND coalesce(r.next_attempt_at, r.due_at) <= now())"
                f"   OR (r.status = 'fired' AND r.fired_by = %(me)s) OR {_CLAIM_ABANDONED})"
                " RETURNING platform, workspace, channel, thread, user_id, text, attempted_at",
                {"me": self.instance, "id": reminder_id, "platforms": self._platforms, "stale_s": self._stale_after_s},
            )
            row = await cursor.fetchone()
            if row is None:
                return False
            # Written before the platform is called: a process dying after the platform took the post (and before
            # the mark) leaves the time its successor looks the post up from. The first attempt's time is kept.
            await conn.execute(
                "UPDATE reminders SET attempted_at = coalesce(attempted_at, now())"
                " WHERE id = %s AND status = 'fired' AND fired_by = %s",
                (reminder_id, self.instance),
            )
        platform, workspace, channel, thread, user_id, text, attempted_at = row
        conversation = ConversationKey(platform=platform, workspace=workspace, channel=channel, thread=thread)
        try:
            await self._notifiers[platform].deliver_reminder(
                conversation=conversation, user=user_id, text=text, key=reminder_key(reminder_id),
                attempted_at=attempted_at, check_claim=lambda: self._check_claim(reminder_id),
            )
        except ClaimLost:
            log.info("reminder %s was taken over by another process while this one waited to post it", reminder_id)
            return False
        except Exception as error:
            await self._retry_later(reminder_id, error)
            return False
        self._unmarked.add(reminder_id)
        await self._mark_unmarked()
        return True

    async def _check_claim(self, reminder_id: int) -> None:
        """Before each post attempt: this process still holds the claim (a delivery that waited out a budget while
        its heartbeat went stale may have been taken over, and posted by the taker); stamps the heartbeat too."""
        async with self._db.connection() as conn:
            await conn.execute(_STAMP, (self.instance,))
            cursor = await conn.execute(
                "SELECT 1 FROM reminders WHERE id = %s AND status = 'fired' AND fired_by = %s", (reminder_id, self.instance)
            )
            held = await cursor.fetchone() is not None
        if not held:
            raise ClaimLost(f"reminder {reminder_id} is no longer claimed by {self.instance}")

    async def _retry_later(self, reminder_id: int, error: Exception) -> None:
        """Back to 'pending' with a backoff, or 'failed' past the grace; armed for the next attempt."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "UPDATE reminders SET attempts = attempts + 1,"
                " status = CASE WHEN now() >= due_at + make_interval(secs => %(grace)s) THEN 'failed' ELSE 'pending' END,"
                " next_attempt_at = now() + make_interval(secs => least(%(first)s * power(2, attempts), %(max)s))"
                " WHERE id = %(id)s AND status = 'fired' AND fired_by = %(me)s RETURNING status, next_attempt_at, attempts",
                {"grace": self._retry_grace_s, "first": RETRY_FIRST_S, "max": RETRY_MAX_S, "id": reminder_id,
                 "me": self.instance},
            )
            row = await cursor.fetchone()
        if row is None:
            return
        status, next_attempt_at, attempts = row
        if status == "failed":
            log.error("reminder %s could not be delivered in %d attempts within %.0f s of its due time; giving up (%r)",
                      reminder_id, attempts, self._retry_grace_s, error)
            return
        log.warning("could not deliver reminder %s (attempt %d, %r); trying again at %s", reminder_id, attempts, error,
                    next_attempt_at.isoformat())
        self.arm(reminder_id, next_attempt_at)

    async def _mark_unmarked(self) -> None:
        """Mark what this process delivered; kept in memory while the database cannot take it."""
        for reminder_id in sorted(self._unmarked):
            try:
                async with self._db.connection() as conn:
                    await conn.execute(
                        "UPDATE reminders SET status = 'delivered', delivered_at = now() WHERE id = %s AND status = 'fired'",
                        (reminder_id,),
                    )
            except Exception:
                log.warning("reminder %s was delivered but cannot be marked yet; marking it at the next sweep", reminder_id,
                            exc_info=True)
                return
            self._unmarked.discard(reminder_id)
