"""A reminder is posted exactly once when its process dies after the platform took the post but before the row
was marked delivered: the process taking the claim over finds the post (Slack metadata, Discord text) instead of
posting it again. And a process whose claim was taken over while it waited to post (its heartbeat stale, itself
alive) posts nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

import pytest
from psycopg_pool import PoolTimeout
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from adapters.discord.notifier import DiscordNotifier
from adapters.slack.notifier import SlackNotifier
from adapters.slack.surface import SlackSurfaces
from adapters.slack.transport import SlackBudgets
from adapters.streaming import Clock, MonotonicClock, Priority, RateBudget
from core.notifier import Notifier
from core.reminders import ReminderService
from core.store.db import Database
from tests.adapters.discord.harness import bot_messages, make_world, running_bot
from tests.e2e.slack_harness import ALICE, start_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator
from tests.emulators.slack import SlackEmulator
from tests.support.outage import DatabaseOutage

pytestmark = pytest.mark.timeout(90)

CHANNEL = "C0TAKEOVER"


Death = Literal["cancelled after the post", "mark fails, then stopped"]


class DiesAfterThePost:
    """Process A's notifier: the adapter's own, after which A goes down before the mark is written — cancelled
    there, or its database gone (the mark fails and waits in A's memory, lost when A stops). `meanwhile` runs in
    between (people talking in the channel before the takeover)."""

    def __init__(
        self, notifier: Notifier, *, death: Death, outage: DatabaseOutage,
        meanwhile: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._notifier = notifier
        self._death = death
        self._outage = outage
        self._meanwhile = meanwhile
        self.posted = 0

    async def approval_expired(self, **_: Any) -> None:
        raise AssertionError("not expected")

    async def deliver_reminder(self, **reminder: Any) -> None:
        await self._notifier.deliver_reminder(**reminder)
        self.posted += 1
        if self._meanwhile is not None:
            await self._meanwhile()
        if self._death == "cancelled after the post":
            raise asyncio.CancelledError  # the platform has the post; the row still says 'fired' by A
        await self._outage.down()


async def _due_reminder(db: Database, *, platform: str, workspace: str, channel: str, thread: str, user: str,
                        text: str) -> int:
    async with db.connection() as conn:
        cursor = await conn.execute(
            "INSERT INTO reminders (platform, workspace, channel, thread, user_id, text, due_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (platform, workspace, channel, thread, user, text, datetime.now(timezone.utc) - timedelta(seconds=1)),
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


@pytest.fixture
async def database(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Database]:
    """The module's database, with a pool that gives up within a second while the database is down."""
    monkeypatch.setattr("core.store.db.POOL_TIMEOUT_S", 1.0)
    opened = Database(url=database_url, data_dir=tmp_path)
    await opened.open()
    async with opened.connection() as conn:
        await conn.execute("DELETE FROM reminders")  # one test's failure leaves no claim for the next one's B
    yield opened
    await opened.close()


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


async def _a_dies_and_b_takes_over(
    db: Database, reminder_id: int, *, platform: str, notifier: Notifier, death: Death, outage: DatabaseOutage,
    meanwhile: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """A claims and posts the reminder and dies before the mark; its heartbeat goes stale; B takes the claim over."""
    scheduler = AsyncIOScheduler(timezone=timezone.utc)
    dies = DiesAfterThePost(notifier, death=death, outage=outage, meanwhile=meanwhile)
    a = ReminderService(db, scheduler, {platform: dies}, instance="process-a")
    if death == "cancelled after the post":
        with pytest.raises(asyncio.CancelledError):
            await a.fire(reminder_id)
    else:
        assert await a.fire(reminder_id), "delivered; the mark waits in A's memory"
        await outage.up()
        del a  # A stops before its next sweep would have written the mark
        await _until_reachable(db)
    assert dies.posted == 1
    assert await _status(db, reminder_id) == "fired"
    async with db.connection() as conn:
        await conn.execute("UPDATE process_heartbeats SET seen_at = now() - interval '5 minutes' WHERE owner = 'process-a'")
    b = ReminderService(db, scheduler, {platform: notifier}, instance="process-b")
    assert await b.sweep() == 1, "B took the abandoned claim over and delivered it"
    assert await _status(db, reminder_id) == "delivered"
    assert await b.sweep() == 0


@pytest.mark.parametrize("death", ["cancelled after the post", "mark fails, then stopped"])
@pytest.mark.parametrize("where, tier", [("channel", "internal"), ("thread", "limited")])
async def test_a_slack_reminder_posted_by_a_process_that_died_before_the_mark_is_not_posted_again(
    database: Database, outage: DatabaseOutage, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator,
    where: str, tier: str, death: Death,
) -> None:
    db = database
    slack = slack_emulator
    if tier == "limited":
        slack.limit_history("limited")  # 15 messages a page, one read a minute
    thread = slack.add_user_message(CHANNEL, "remind me", ALICE) if where == "thread" else ""
    bot = await start_bot(db, slack, openai_emulator.base_url, slack_history_tier=tier)
    try:
        text = f"water the plants ({where})"
        reminder_id = await _due_reminder(db, platform="slack", workspace=slack.team_id, channel=CHANNEL, thread=thread,
                                          user=ALICE, text=text)

        def posted() -> int:
            shown = slack.thread(CHANNEL, thread) if thread else slack.messages(CHANNEL)
            return sum(1 for m in shown if m.is_bot and text in m.text)

        async def chatter() -> None:
            # People keep talking after A's post: B's look-up reads past them, from A's attempt on.
            for n in range(20):
                slack.add_user_message(CHANNEL, f"chatter {n}", ALICE, thread_ts=thread or None)

        await _a_dies_and_b_takes_over(db, reminder_id, platform="slack", notifier=bot.adapter.notifier, death=death,
                                       outage=outage, meanwhile=chatter)
        assert posted() == 1
    finally:
        await bot.stop()


@pytest.mark.parametrize("death", ["cancelled after the post", "mark fails, then stopped"])
async def test_a_discord_reminder_posted_by_a_process_that_died_before_the_mark_is_not_posted_again(
    discord_emulator: DiscordEmulator, database: Database, outage: DatabaseOutage, openai_emulator: OpenAIEmulator,
    death: Death,
) -> None:
    db = database
    dc = discord_emulator
    w = make_world(dc)
    dc.set_nonce_window(0.0)  # long after Discord's nonce window: only the look-up can tell
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        reminder_id = await _due_reminder(db, platform="discord", workspace=str(w.guild_id), channel=str(w.channel_id),
                                          thread="", user=str(w.alice), text="stand-up in 5")
        await dc.send_user_message(w.channel_id, w.bob, "anyone around?")
        await _a_dies_and_b_takes_over(db, reminder_id, platform="discord", notifier=adapter.notifier, death=death,
                                       outage=outage)
    assert [m.content for m in bot_messages(dc, w.channel_id)] == [f"<@{w.alice}> stand-up in 5"]


class HeldBudget(RateBudget):
    """Process A's post budget: every call waits until `released` (A busy behind other posts) and says when it
    started waiting, so A's heartbeat can go stale and B take over meanwhile."""

    def __init__(self, *, clock: Clock) -> None:
        super().__init__(capacity=2, refill_per_s=1.0, clock=clock)
        self.waiting = asyncio.Event()
        self.released = asyncio.Event()

    async def acquire(self, priority: Priority, requester_key: Hashable = None, **options: Any) -> None:
        self.waiting.set()
        await self.released.wait()
        await super().acquire(priority, requester_key, **options)


class HeldPosts(SlackBudgets):
    """SlackBudgets whose chat.postMessage budget is the held one."""

    def __init__(self, held: HeldBudget, *, clock: Clock) -> None:
        super().__init__(clock=clock, share=1.0)
        self._held = held

    def post(self, team_id: str, channel: str) -> RateBudget:
        return self._held


async def _b_takes_over_while_a_waits(db: Database, reminder_id: int, *, platform: str, a_notifier: Notifier,
                                      held: HeldBudget, b_notifier: Notifier) -> None:
    scheduler = AsyncIOScheduler(timezone=timezone.utc)
    a = ReminderService(db, scheduler, {platform: a_notifier}, instance="process-a")
    b = ReminderService(db, scheduler, {platform: b_notifier}, instance="process-b")
    a_fire = asyncio.ensure_future(a.fire(reminder_id))
    await asyncio.wait_for(held.waiting.wait(), 10.0)
    async with db.connection() as conn:
        await conn.execute("UPDATE process_heartbeats SET seen_at = now() - interval '5 minutes' WHERE owner = 'process-a'")
    assert await b.sweep() == 1, "A looked dead: B took the claim over and posted it"
    held.released.set()
    assert await asyncio.wait_for(a_fire, 10.0) is False, "A found the claim gone and posted nothing"
    assert await _status(db, reminder_id) == "delivered"


async def test_a_slack_reminder_taken_over_while_its_process_waited_to_post_is_posted_once(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        clock = bot.adapter.surfaces.clock
        held = HeldBudget(clock=clock)
        # Process A: its own budgets (a process of its own), on the same Slack.
        a_surfaces = SlackSurfaces(client=bot.adapter.surfaces.client, budgets=HeldPosts(held, clock=clock), clock=clock)
        reminder_id = await _due_reminder(db, platform="slack", workspace=slack.team_id, channel=CHANNEL, thread="",
                                          user=ALICE, text="renew the certificate")
        await _b_takes_over_while_a_waits(db, reminder_id, platform="slack", a_notifier=SlackNotifier(a_surfaces),
                                          held=held, b_notifier=bot.adapter.notifier)
        assert sum(1 for m in slack.messages(CHANNEL) if m.is_bot and "renew the certificate" in m.text) == 1
    finally:
        await bot.stop()


async def test_a_discord_reminder_taken_over_while_its_process_waited_to_post_is_posted_once(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    dc.set_nonce_window(0.0)  # only the claim check can keep A from posting it again
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        clock = MonotonicClock()
        held = HeldBudget(clock=clock)
        a_notifier = DiscordNotifier(client=lambda: adapter.client, budgets=lambda _channel: held, clock=clock)
        reminder_id = await _due_reminder(db, platform="discord", workspace=str(w.guild_id), channel=str(w.channel_id),
                                          thread="", user=str(w.alice), text="renew the certificate")
        await _b_takes_over_while_a_waits(db, reminder_id, platform="discord", a_notifier=a_notifier, held=held,
                                          b_notifier=adapter.notifier)
    assert [m.content for m in bot_messages(dc, w.channel_id)] == [f"<@{w.alice}> renew the certificate"]
