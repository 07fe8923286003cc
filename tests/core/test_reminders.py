"""Reminders fire exactly once, even with two bot instances armed for the same row."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import PoolTimeout
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from core.reminders import ReminderService
from core.requests import ConversationKey
from core.store.db import Database
from core.tools import ToolContext, ToolServices
from core.tools.registry import ToolError
from core.tools.reminders import CREATE_REMINDER, parse_when
from tests.support.outage import DatabaseOutage

KEY = ConversationKey(platform="test", workspace="W", channel="C", thread="t1")


class RecordingNotifier:
    def __init__(self) -> None:
        self.reminders: list[tuple[ConversationKey, str, str]] = []
        self.attempts_seen: list[tuple[str, datetime | None]] = []  # (key, attempted_at) of every delivery

    async def approval_expired(self, *, continuation_id: str, message_refs: list[dict[str, Any]]) -> None:
        raise AssertionError("not expected")

    async def deliver_reminder(
        self, *, conversation: ConversationKey, user: str, text: str, key: str, attempted_at: datetime | None,
        check_claim: Callable[[], Awaitable[None]],
    ) -> None:
        self.attempts_seen.append((key, attempted_at))
        await check_claim()  # as the adapters do right before each post
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


class BlippingNotifier(RecordingNotifier):
    """Fails its first `failures` deliveries, as a platform in a blip would."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.attempts = 0

    async def deliver_reminder(self, **reminder: Any) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise ConnectionError("platform unreachable")
        await super().deliver_reminder(**reminder)


async def _insert_due(db: Database, text: str, **columns: Any) -> int:
    names = ", ".join(("platform", "workspace", "channel", "thread", "user_id", "text", "due_at", *columns))
    values = ", ".join(["'test'", "'W'", "'C'", "'t1'", "'U1'", "%s", "now() - interval '1 second'", *(["%s"] * len(columns))])
    async with db.connection() as conn:
        cursor = await conn.execute(f"INSERT INTO reminders ({names}) VALUES ({values}) RETURNING id", (text, *columns.values()))
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def _row(db: Database, reminder_id: int) -> tuple[Any, ...]:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT status, attempts, fired_by FROM reminders WHERE id = %s", (reminder_id,))
        row = await cursor.fetchone()
    assert row is not None
    return tuple(row)


async def test_a_platform_blip_retries_the_reminder_with_backoff_and_delivers_it_once(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("core.reminders.RETRY_FIRST_S", 0.1)
    notifier = BlippingNotifier(failures=2)
    scheduler = AsyncIOScheduler(timezone=timezone.utc)
    service = ReminderService(db, scheduler, {"test": notifier}, instance="blip-process")
    reminder_id = await _insert_due(db, "after the blip")
    scheduler.start()
    try:
        assert await service.sweep() == 0  # the first attempt fails: back to pending, armed for its next attempt
        assert (await _row(db, reminder_id))[:2] == ("pending", 1)
        await _wait_until(lambda: notifier.reminders)
        await asyncio.sleep(0.3)
        assert [text for _, _, text in notifier.reminders] == ["after the blip"]
        assert notifier.attempts == 3
        assert (await _row(db, reminder_id))[0] == "delivered"
        assert await service.sweep() == 0
    finally:
        scheduler.shutdown(wait=False)


async def test_a_reminder_still_failing_after_the_grace_is_marked_failed(db: Database) -> None:
    notifier = BlippingNotifier(failures=1_000)
    scheduler = AsyncIOScheduler(timezone=timezone.utc)
    service = ReminderService(db, scheduler, {"test": notifier}, instance="grace-process", retry_grace_s=0.5)
    reminder_id = await _insert_due(db, "never reachable")
    assert await service.sweep() == 0
    assert (await _row(db, reminder_id))[0] == "failed", "due 1 s ago with a grace of 0.5 s: given up, not retried"
    assert await service.sweep() == 0
    assert notifier.attempts == 1


async def test_a_claim_left_by_a_dead_process_is_taken_over_and_delivered_once(db: Database) -> None:
    notifier = RecordingNotifier()
    scheduler = AsyncIOScheduler(timezone=timezone.utc)
    survivor = ReminderService(db, scheduler, {"test": notifier}, instance="survivor")
    # A process claimed it, then died before delivering: its heartbeat is stale.
    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO process_heartbeats (owner, seen_at) VALUES ('dead-process', now() - interval '5 minutes')"
        )
    dead = await _insert_due(db, "claimed by the dead", status="fired", fired_by="dead-process")
    # One claimed by a process still beating is left to it.
    async with db.connection() as conn:
        await conn.execute("INSERT INTO process_heartbeats (owner, seen_at) VALUES ('live-process', now())")
    live = await _insert_due(db, "claimed by the living", status="fired", fired_by="live-process")
    assert await survivor.sweep() == 1
    assert [text for _, _, text in notifier.reminders] == ["claimed by the dead"]
    assert await _row(db, dead) == ("delivered", 0, "survivor")
    assert (await _row(db, live))[0] == "fired"
    assert await survivor.sweep() == 0
    assert len(notifier.reminders) == 1


async def _until_reachable(db: Database) -> None:
    """After an outage the pool reconnects with a backoff: wait for it to hand out connections again."""
    for _ in range(50):
        try:
            async with db.connection() as conn:
                await conn.execute("SELECT 1")
            return
        except PoolTimeout:
            await asyncio.sleep(0.2)
    raise AssertionError("the database did not come back")


async def test_a_delivery_whose_mark_cannot_be_written_is_marked_later_and_never_sent_again(
    pg_server: str, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("core.store.db.POOL_TIMEOUT_S", 1.0)
    outage = DatabaseOutage(admin_url=pg_server, database_url=database_url)
    database = Database(url=database_url, data_dir=tmp_path)
    await database.open()
    try:
        delivered: list[str] = []

        class DatabaseDiesAfterDelivery(RecordingNotifier):
            async def deliver_reminder(self, *, text: str, **_: Any) -> None:
                delivered.append(text)
                await outage.down()  # the platform took it; the database goes before the mark

        scheduler = AsyncIOScheduler(timezone=timezone.utc)
        me = ReminderService(database, scheduler, {"test": DatabaseDiesAfterDelivery()}, instance="marker")
        other = ReminderService(database, scheduler, {"test": RecordingNotifier()}, instance="other")
        reminder_id = await _insert_due(database, "delivered, unmarked")
        assert await me.fire(reminder_id)
        await outage.up()
        await _until_reachable(database)
        assert await other.sweep() == 0, "the claim's process is alive: not taken over"
        assert await me.sweep() == 0, "marked, not delivered again"
        assert delivered == ["delivered, unmarked"]
        assert (await _row(database, reminder_id))[0] == "delivered"
    finally:
        await outage.up()
        await database.close()


async def _attempted_at(db: Database, reminder_id: int) -> datetime | None:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT attempted_at FROM reminders WHERE id = %s", (reminder_id,))
        row = await cursor.fetchone()
    assert row is not None
    return row[0]


async def test_a_takeover_after_the_platform_took_the_post_is_given_the_first_attempt_to_look_it_up(db: Database) -> None:
    """Process A records its attempt before calling the platform, the platform takes the post, A dies before the
    mark: B, taking the claim over, is told when A attempted it (what it looks the post up from) and its key."""
    posted: list[tuple[str, datetime | None]] = []
    recorded_before_the_call: list[datetime | None] = []

    class DiesAfterThePost(RecordingNotifier):
        async def deliver_reminder(self, *, key: str, attempted_at: datetime | None, **_: Any) -> None:
            recorded_before_the_call.append(await _attempted_at(db, reminder_id))
            posted.append((key, attempted_at))
            raise asyncio.CancelledError  # the process goes down here: the platform has it, the row is not marked

    scheduler = AsyncIOScheduler(timezone=timezone.utc)
    a = ReminderService(db, scheduler, {"test": DiesAfterThePost()}, instance="dies-after-post")
    b_notifier = RecordingNotifier()
    b = ReminderService(db, scheduler, {"test": b_notifier}, instance="takes-over")
    reminder_id = await _insert_due(db, "posted, then the process died")
    with pytest.raises(asyncio.CancelledError):
        await a.fire(reminder_id)
    assert posted == [(f"reminder:{reminder_id}", None)], "the first attempt has nothing to look up"
    first_attempt = recorded_before_the_call[0]
    assert first_attempt is not None, "the attempt is in the row before the platform is called"
    assert (await _row(db, reminder_id))[0] == "fired"
    assert await b.sweep() == 0, "A is still beating: its claim is not taken over"
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE process_heartbeats SET seen_at = now() - interval '5 minutes' WHERE owner = 'dies-after-post'"
        )
    assert await b.sweep() == 1
    assert b_notifier.attempts_seen == [(f"reminder:{reminder_id}", first_attempt)]
    assert await _row(db, reminder_id) == ("delivered", 0, "takes-over")
    assert await _attempted_at(db, reminder_id) == first_attempt, "the first attempt's time is kept"


async def test_a_retry_after_a_failed_delivery_is_given_the_first_attempt_to_look_it_up(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure may have come after the platform did the work (a lost reply): the retry looks it up too."""
    monkeypatch.setattr("core.reminders.RETRY_FIRST_S", 0.0)
    notifier = BlippingNotifier(failures=1)
    service = ReminderService(db, AsyncIOScheduler(timezone=timezone.utc), {"test": notifier}, instance="retries")
    reminder_id = await _insert_due(db, "after a lost reply")
    assert await service.sweep() == 0
    first_attempt = await _attempted_at(db, reminder_id)
    assert first_attempt is not None
    await asyncio.sleep(0.05)
    assert await service.sweep() == 1
    assert notifier.attempts_seen == [(f"reminder:{reminder_id}", first_attempt)]


async def test_a_delivery_whose_claim_was_taken_over_while_it_waited_posts_nothing(db: Database) -> None:
    """A waits for its rate budget (a busy channel) while its heartbeat goes stale (a database failover): B takes
    the claim over and delivers; A, let go, finds the claim no longer its own and posts nothing."""
    released = asyncio.Event()
    waiting = asyncio.Event()

    class WaitsForItsBudget(RecordingNotifier):
        async def deliver_reminder(self, **reminder: Any) -> None:
            waiting.set()
            await released.wait()
            await super().deliver_reminder(**reminder)

    scheduler = AsyncIOScheduler(timezone=timezone.utc)
    a_notifier, b_notifier = WaitsForItsBudget(), RecordingNotifier()
    a = ReminderService(db, scheduler, {"test": a_notifier}, instance="waits")
    b = ReminderService(db, scheduler, {"test": b_notifier}, instance="takes-over-meanwhile")
    reminder_id = await _insert_due(db, "one of us posts it")
    a_fire = asyncio.ensure_future(a.fire(reminder_id))
    await asyncio.wait_for(waiting.wait(), 5.0)
    async with db.connection() as conn:
        await conn.execute("UPDATE process_heartbeats SET seen_at = now() - interval '5 minutes' WHERE owner = 'waits'")
    assert await b.sweep() == 1
    released.set()
    assert await a_fire is False
    assert [text for _, _, text in b_notifier.reminders] == ["one of us posts it"]
    assert a_notifier.reminders == []
    assert await _row(db, reminder_id) == ("delivered", 0, "takes-over-meanwhile")
