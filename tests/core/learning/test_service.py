"""The service's choosing and sharing: adding again changes how far back, progress with a total and time left while a
backfill reads, one process per channel, another process's add seen, permalinks asked for, Discord's thread list."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timedelta

import pytest

from core.learning.model import ChannelChange, ChannelMessage, HistoryPage
from core.store import learned_channels as store
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from tests.core.learning.paged_history import T0, Channel, PagedHistory, msg, ts
from tests.core.learning.support import PLACE, indexed, rebuilt_from_scratch, service, stored_ids
from tests.core.learning.test_backfill import incidents

NOW = T0 + timedelta(days=10)


@pytest.fixture(autouse=True)
async def empty_tables(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")


async def test_adding_a_chosen_channel_again_changes_how_far_back_and_how_long(db: Database) -> None:
    async with service(db, now=lambda: NOW) as learning:
        learning.attach("slack", PagedHistory({"C1": incidents()}))
        first = await learning.add(PLACE, since_days=None, keep_days=None)
        assert (first.since_days, first.keep_days) == (90, None)  # LEARN_SINCE_DAYS
        await learning.run_due()
        shorter = await learning.add(PLACE, since_days=30, keep_days=60)
        assert (shorter.since_days, shorter.keep_days, shorter.state) == (30, 60, "live")
        further = await learning.add(PLACE, since_days=120, keep_days=None)
        assert (further.since_days, further.state) == (120, "backfilling")  # reads back further from the start
        assert [c.place for c in await learning.list()] == [PLACE]
        assert await learning.list(platform="discord") == [] and await learning.list(workspace="T9") == []
    async with db.connection() as conn:
        row = await (await conn.execute("SELECT name, kind, owner, restricted, exposure FROM sources")).fetchone()
    assert row == ("channel:slack:T1:C1", "channel", "slack:T1", True, "prefetch")


async def test_a_backfill_under_way_shows_a_total_and_time_left_and_holds_its_channel(db: Database) -> None:
    channel = incidents()
    history = PagedHistory({"C1": channel}, page_size=2)
    history.hold_after = 3
    ticks = iter(NOW + timedelta(seconds=10 * n) for n in range(10_000))
    async with service(db, now=lambda: next(ticks)) as one, service(db, now=lambda: NOW) as other:
        one.attach("slack", history)
        other.attach("slack", PagedHistory({"C1": channel}))
        await one.add(PLACE, since_days=30, keep_days=None)
        job = asyncio.create_task(one.run_due())
        await history.held.wait()
        reading = await one.get(PLACE)
        assert reading is not None and reading.state == "backfilling"
        assert reading.done == 6 and reading.total is not None and reading.total > reading.done
        assert reading.eta_s is not None and reading.eta_s > 0
        assert await other.run_due() == 0  # the channel's lease is held: one process reads it
        history.release.set()
        assert await job == 1
        learned = await one.get(PLACE)
    assert learned is not None and learned.state == "live" and learned.eta_s is None
    assert learned.done == learned.total == len(channel.messages)


async def test_a_channel_added_by_another_process_is_learnt_from_here_after_a_refresh(db: Database) -> None:
    async with service(db, chosen_refresh_s=0) as here, service(db) as cli:
        here.attach("slack", PagedHistory({"C1": Channel()}))
        await here.take(ChannelChange(kind="member", place=PLACE, user="U1"))  # nothing chosen yet
        await cli.add(PLACE, since_days=30, keep_days=None, history=PagedHistory({"C1": Channel()}))
        first = msg(0, "taken once the refresh saw the channel")
        await here.take(ChannelChange(kind="message", place=PLACE, message=first))  # starts the refresh
        await here.settled()
        second = msg(1, "and this one too")
        await here.take(ChannelChange(kind="message", place=PLACE, message=second))
        await here.settled()
    assert second.id in await stored_ids(db)


async def test_once_a_run_starts_another_processs_channel_no_live_change_of_it_is_dropped(db: Database) -> None:
    """The chosen channels are read as a run starts its scans: a change taken from then on is kept (one before is in the
    history the scan reads), with no reload left to the next change (which used to drop the one that asked for it)."""
    async with service(db) as here, service(db) as cli:
        here.attach("slack", PagedHistory({"C1": Channel()}))
        await here.take(ChannelChange(kind="member", place=PLACE, user="U1"))  # nothing chosen, read just now
        await cli.add(PLACE, since_days=30, keep_days=None, history=PagedHistory({"C1": Channel()}))
        assert await here.run_due() == 1
        assert here.chosen(PLACE)
        first = msg(0, "the first message after the backfill")
        await here.take(ChannelChange(kind="message", place=PLACE, message=first))
        await here.settled()
    assert first.id in await stored_ids(db)


async def test_learning_turned_on_changed_and_off_is_in_the_channels_settings_history_with_who(db: Database) -> None:
    async with service(db, now=lambda: NOW) as learning:
        learning.attach("slack", PagedHistory({"C1": incidents()}))
        await learning.add(PLACE, since_days=30, keep_days=None, by="slack:T1:U0ADMIN")
        await learning.add(PLACE, since_days=30, keep_days=None, by="slack:T1:U0ADMIN")  # nothing changed: no entry
        await learning.add(PLACE, since_days=90, keep_days=365, by="cli:ana")
        assert await learning.remove(PLACE, by="discord:G1:42")
    entries = [(e.field, e.before, e.after, e.changed_by) for e in await ChannelConfigStore(db).history(PLACE.key)]
    assert entries == [
        ("learn", {"since_days": 90, "keep_days": 365}, None, "discord:G1:42"),
        ("learn", {"since_days": 30, "keep_days": None}, {"since_days": 90, "keep_days": 365}, "cli:ana"),
        ("learn", None, {"since_days": 30, "keep_days": None}, "slack:T1:U0ADMIN"),
    ]


class NoLinks(PagedHistory):
    """History whose messages carry no permalink: the door makes one on request (Slack's chat.getPermalink)."""

    asked: list[str]

    async def history(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        page = await super().history(workspace, channel, oldest=oldest, cursor=cursor)
        return HistoryPage(messages=tuple(dataclasses.replace(m, permalink="") for m in page.messages),
                           next_cursor=page.next_cursor)

    async def permalink(self, workspace: str, channel: str, message: ChannelMessage) -> str:
        self.asked.append(message.id)
        return await super().permalink(workspace, channel, message)


async def test_a_document_whose_first_message_has_no_permalink_gets_one_from_the_door(db: Database) -> None:
    channel = Channel()
    for minute in range(3):
        channel.put(msg(minute, f"note {minute}"))
    history = NoLinks({"C1": channel})
    history.asked = []
    async with service(db, now=lambda: NOW) as learning:
        learning.attach("slack", history)
        await learning.add(PLACE, since_days=30, keep_days=None)
        await learning.run_due()
    [(_, uri, _)] = (await indexed(db)).values()
    assert history.asked == [ts(0)]  # one call: the document's first message only
    assert uri == f"https://example.slack.com/archives/C1/p{ts(0).replace('.', '')}"


class DiscordLike(PagedHistory):
    """A thread with no starter message in the channel: history does not list it, the thread list does."""

    async def threads(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        await self._gate(("threads", channel, cursor))
        root = self.channels[channel].messages[ts(100)]
        return HistoryPage(messages=(dataclasses.replace(root, thread=""),))

    async def history(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        page = await super().history(workspace, channel, oldest=oldest, cursor=cursor)
        return HistoryPage(messages=tuple(m for m in page.messages if m.id != ts(100)), next_cursor=page.next_cursor)


async def test_threads_only_the_thread_list_names_are_read_too(db: Database) -> None:
    channel = incidents()
    root = channel.put(msg(100, "Release train — thread opened from the sidebar", author="Fay"))
    channel.put(msg(101, "the train leaves at five", author="Gus", thread=root.id))
    async with service(db, now=lambda: NOW) as learning:
        learning.attach("discord", DiscordLike({"C1": channel}))
        place = dataclasses.replace(PLACE, platform="discord")
        await learning.add(place, since_days=30, keep_days=None)
        await learning.run_due()
    assert sorted(await stored_ids(db)) == sorted(channel.messages)
    documents = await indexed(db)
    assert documents == await rebuilt_from_scratch(db)
    assert documents[f"thread:{root.id}"][0] == "#incidents — 2026-11-03, thread by Fay"
    row = await store.get_channel(db, place)
    assert row is not None and row.state == "live"


async def test_purging_a_team_deletes_its_learned_channels_and_everything_learnt(db: Database) -> None:
    from core.store.team_data import forget_team

    async with service(db, now=lambda: NOW) as learning:
        learning.attach("slack", PagedHistory({"C1": incidents()}))
        await learning.add(PLACE, since_days=30, keep_days=None)
        await learning.run_due()
        kept = await forget_team(db, "slack", "T1")  # left, data kept: still learnt (nothing reads it meanwhile)
        assert await learning.get(PLACE) is not None and await indexed(db)
        purged = await forget_team(db, "slack", "T1", purge=True)
        assert await learning.list() == []
    assert purged.deleted["sources"] == 1 and kept.deleted == {}
    assert await indexed(db) == {} and await stored_ids(db) == []


async def test_channels_are_read_side_by_side_and_one_added_during_a_run_is_started_in_it(db: Database) -> None:
    slow = PagedHistory({"C1": incidents(), "C2": incidents(), "C3": incidents()})
    slow.hold_after = 1  # the first channel's second page waits
    async with service(db, now=lambda: NOW, due_recheck_s=0.01) as learning:
        learning.attach("slack", slow)
        await learning.add(PLACE, since_days=30, keep_days=None)
        run = asyncio.create_task(learning.run_due())
        await slow.held.wait()
        slow.hold_after = None  # the other channels' reads go through at once
        for other in ("C2", "C3"):
            await learning.add(dataclasses.replace(PLACE, channel=other), since_days=30, keep_days=None)

        async def others_live() -> bool:
            states = {c.place.channel: c.state for c in await learning.list()}
            return states["C2"] == states["C3"] == "live"

        async with asyncio.timeout(60):  # a bound on a hang, not a measure: what is checked is the state reached
            while not await others_live():
                await asyncio.sleep(0.01)
        assert (await learning.get(PLACE)).state == "backfilling"  # still waiting for its page
        slow.release.set()
        assert await run == 3
    assert {c.state for c in await learning.list()} == {"live"}
