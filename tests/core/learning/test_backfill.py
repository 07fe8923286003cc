"""Backfill of a chosen channel through its history door: threads, resumable checkpoints, failures, the catch-up after
a restart, retention and a channel left — against the real Postgres."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import pytest

from core.learning.model import ChannelChange, HistoryPage, LearningRefused
from core.store import learned_channels as store
from core.store.db import Database
from tests.core.learning.paged_history import T0, Channel, PagedHistory, msg, ts
from tests.core.learning.support import PLACE, indexed, rebuilt_from_scratch, service, stored_ids

NOW = T0 + timedelta(days=10)


def clock():
    return NOW


@pytest.fixture(autouse=True)
async def empty_tables(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")


def incidents() -> Channel:
    """Two days of #incidents: channel messages (one a bot's, one with a file), a thread of five replies, another
    of two."""
    channel = Channel()
    for minute in (0, 10, 20, 40, 50, 60, 65):
        channel.put(msg(minute, f"status update {minute}: the database is slow", author="Bo" if minute % 20 else "Ana"))
    channel.put(msg(15, "Deploy finished for build 77", author="ci-bot", by_bot=True))
    channel.put(msg(25, "here are the graphs", files=("latency.png",)))
    root = channel.put(msg(30, "Who owns the failover runbook?", author="Ana"))
    for i in range(5):
        channel.put(msg(31 + i, f"reply {i}: the runbook lives in the wiki, page failover-{i}", author="Cy",
                        thread=root.id))
    day2 = 24 * 60
    for minute in range(day2, day2 + 30, 10):
        channel.put(msg(minute, f"day two note {minute}", author="Dee"))
    root2 = channel.put(msg(day2 + 40, "Postmortem for the outage?", author="Dee"))
    channel.put(msg(day2 + 41, "scheduled for Friday", author="Ana", thread=root2.id))
    channel.put(msg(day2 + 42, "thanks", author="Dee", thread=root2.id))
    return channel


async def test_a_channels_backfill_reads_its_history_and_threads_into_documents(db: Database) -> None:
    channel = incidents()
    history = PagedHistory({"C1": channel})
    async with service(db, now=clock) as learning:
        learning.attach("slack", history)
        added = await learning.add(PLACE, since_days=30, keep_days=None)
        assert (added.state, added.name, added.since_days) == ("backfilling", "incidents", 30)
        assert await learning.run_due() == 1
        learned = await learning.get(PLACE)
    assert learned is not None and learned.state == "live" and learned.error == ""
    assert learned.done == learned.total == len(channel.messages)
    assert sorted(await stored_ids(db)) == sorted(channel.messages)
    documents = await indexed(db)
    assert documents == await rebuilt_from_scratch(db)
    runbook = documents[f"thread:{ts(30)}"]
    assert runbook[0] == "#incidents — 2026-11-03, thread by Ana"
    assert runbook[1] == channel.messages[ts(30)].permalink
    text = "\n\n".join(runbook[2])
    assert text.startswith("[2026-11-03 09:30] Ana: Who owns the failover runbook?")
    assert "[2026-11-03 09:35] Cy: reply 4: the runbook lives in the wiki, page failover-4" in text
    assert all(title == "#incidents — 2026-11-03" for key, (title, _, _) in documents.items()
               if key.startswith("stretch:2026-11-03"))
    everything = "\n".join("\n".join(chunks) for _, _, chunks in documents.values())
    assert "Deploy finished" not in everything  # a bot's message is never learned from
    assert "Ana: here are the graphs (file: latency.png)" in everything
    # Stretches hold at most LEARN_STRETCH_MESSAGES (4 here) and never cross a UTC day.
    async with db.connection() as conn:
        rows = await (await conn.execute(
            "SELECT document, count(*), count(DISTINCT date_trunc('day', at AT TIME ZONE 'UTC')) FROM channel_messages"
            " WHERE thread = '' GROUP BY document")).fetchall()
    assert rows and all(count <= 4 and days == 1 for _, count, days in rows)
    # Each reply page was asked for once: the thread of five in two pages, the other in one.
    assert [c for c in history.calls if c[0] == "replies"] == [
        ("replies", ts(30), ""), ("replies", ts(30), ts(32)), ("replies", ts(24 * 60 + 40), "")]


async def test_a_backfill_stopped_mid_way_goes_on_from_its_checkpoint_without_duplicates(db: Database) -> None:
    channel = incidents()
    first = PagedHistory({"C1": channel}, page_size=3)
    first.hold_after = 2  # the process stops while the third page is asked for
    async with service(db, now=clock) as learning:
        learning.attach("slack", first)
        await learning.add(PLACE, since_days=30, keep_days=None)
        job = asyncio.create_task(learning.run_due())
        await first.held.wait()
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
    stopped = await store.get_channel(db, PLACE)
    assert stopped is not None and stopped.state == "backfilling" and stopped.checkpoint["phase"] == "history"
    assert stopped.done == 6 and stopped.checkpoint["cursor"] != ""
    second = PagedHistory({"C1": channel}, page_size=3)
    async with service(db, now=clock) as learning:
        learning.attach("slack", second)
        assert await learning.run_due() == 1
        learned = await learning.get(PLACE)
    assert second.calls[0] == ("history", "C1", stopped.checkpoint["cursor"])  # not from the start again
    # The one read from the start is the last look at what came since the backfill began.
    history_reads = [c for c in second.calls if c[0] == "history"]
    assert history_reads.count(("history", "C1", "")) == 1 and history_reads[-1] == ("history", "C1", "")
    assert learned is not None and learned.state == "live"
    ids = await stored_ids(db)
    assert len(ids) == len(set(ids)) == len(channel.messages)
    assert await indexed(db) == await rebuilt_from_scratch(db)


async def test_a_message_posted_while_the_backfill_reads_is_learnt_though_its_live_event_was_missed(
    db: Database,
) -> None:
    channel = incidents()
    history = PagedHistory({"C1": channel}, page_size=3)
    history.hold_after = 1
    async with service(db, now=clock) as learning:
        learning.attach("slack", history)
        await learning.add(PLACE, since_days=30, keep_days=None)
        job = asyncio.create_task(learning.run_due())
        await history.held.wait()
        # Its event went to a process that did not know the channel was chosen yet, and was dropped there.
        late = channel.put(msg(10 * 24 * 60, "posted while the backfill read page one", author="Hal"))
        history.release.set()
        assert await job == 1
    assert late.id in await stored_ids(db)
    assert await indexed(db) == await rebuilt_from_scratch(db)


async def test_a_platform_failure_is_an_error_with_its_sentence_and_is_retried_later(db: Database) -> None:
    channel = incidents()
    history = PagedHistory({"C1": channel})
    later = [NOW]
    async with service(db, now=lambda: later[0]) as learning:
        learning.attach("slack", history)
        await learning.add(PLACE, since_days=30, keep_days=None)
        history.fail = ConnectionResetError("peer went away")
        await learning.run_due()
        failed = await learning.get(PLACE)
        assert failed is not None and failed.state == "error"
        assert failed.error.startswith("Reading the history of #incidents failed (ConnectionResetError)")
        history.fail = None
        assert await learning.run_due() == 0  # backing off
        later[0] = NOW + timedelta(hours=2)
        assert await learning.run_due() == 1
        learned = await learning.get(PLACE)
    assert learned is not None and (learned.state, learned.error) == ("live", "")
    assert sorted(await stored_ids(db)) == sorted(channel.messages)


class GoneThread(PagedHistory):
    """A root deleted on the platform after history listed it: its replies are refused every time."""

    async def replies(self, workspace: str, channel: str, thread: str, *, cursor: str) -> HistoryPage:
        if thread == ts(30):
            await self._gate(("replies", thread, cursor))
            raise LearningRefused("That thread is gone (thread_not_found).")
        return await super().replies(workspace, channel, thread, cursor=cursor)


async def test_a_thread_whose_replies_keep_failing_is_passed_over_after_a_few_scans(db: Database) -> None:
    channel = incidents()
    later = [NOW]
    async with service(db, now=lambda: later[0]) as learning:
        learning.attach("slack", GoneThread({"C1": channel}))
        await learning.add(PLACE, since_days=30, keep_days=None)
        for attempt in range(2):
            await learning.run_due()
            failed = await learning.get(PLACE)
            assert failed is not None and (failed.state, failed.error) == ("error", "That thread is gone (thread_not_found).")
            later[0] += timedelta(hours=2)
        await learning.run_due()
        learned = await learning.get(PLACE)
    assert learned is not None and (learned.state, learned.error) == ("live", "")
    stored = set(await stored_ids(db))
    assert ts(24 * 60 + 42) in stored and ts(31) not in stored  # the other thread read; the gone one's replies not


async def test_adding_refuses_a_dm_and_passes_on_the_platforms_sentence(db: Database) -> None:
    history = PagedHistory({"D1": Channel(name="", direct=True)})
    async with service(db, now=clock) as learning:
        learning.attach("slack", history)
        with pytest.raises(LearningRefused, match="never learned from"):
            await learning.add(dataclasses.replace(PLACE, channel="D1"), since_days=None, keep_days=None)
        with pytest.raises(LearningRefused, match="invite it"):
            await learning.add(dataclasses.replace(PLACE, channel="C404"), since_days=None, keep_days=None)
        assert await learning.list() == []


async def test_after_a_restart_the_catch_up_reads_what_changed_while_nobody_listened(db: Database) -> None:
    channel = incidents()
    async with service(db, now=lambda: T0 + timedelta(days=4)) as learning:
        learning.attach("slack", PagedHistory({"C1": channel}))
        await learning.add(PLACE, since_days=30, keep_days=None)
        await learning.run_due()
        assert await learning.run_due() == 0  # caught up in this process
    # While the bot was down: edits and a delete inside the re-scan window (day two) and outside it (day one), a new
    # reply in an old thread, a new channel message.
    day2 = 24 * 60
    channel.put(dataclasses.replace(channel.messages[ts(day2 + 10)], text="day two note: fixed by failing over"))
    del channel.messages[ts(day2 + 20)]
    channel.put(dataclasses.replace(channel.messages[ts(10)], text="status update 10: edited too long ago"))
    channel.put(msg(5 * day2, "late reply: runbook moved to the handbook", author="Eve", thread=ts(30)))
    channel.put(msg(6 * day2, "all quiet this week", author="Eve"))
    restarted = PagedHistory({"C1": channel})
    async with service(db, now=lambda: T0 + timedelta(days=8)) as learning:  # re-scans from day two on
        learning.attach("slack", restarted)
        assert await learning.run_due() == 1
        learned = await learning.get(PLACE)
    assert learned is not None and learned.state == "live"
    assert sorted(await stored_ids(db)) == sorted(channel.messages)
    documents = await indexed(db)
    assert documents == await rebuilt_from_scratch(db)
    everything = "\n".join("\n".join(chunks) for _, _, chunks in documents.values())
    assert "fixed by failing over" in everything and f"day two note {day2 + 20}" not in everything
    assert "runbook moved to the handbook" in "\n".join(documents[f"thread:{ts(30)}"][2])
    assert "all quiet this week" in everything
    # History is read again over the whole window, so even day one's edit is seen (only a delete needs the window).
    assert "edited too long ago" in everything


async def test_retention_purges_messages_older_than_the_channel_keeps(db: Database) -> None:
    channel = incidents()
    async with service(db, now=clock) as learning:
        learning.attach("slack", PagedHistory({"C1": channel}))
        await learning.add(PLACE, since_days=30, keep_days=9)  # day one is 10 days old, day two 9
        await learning.run_due()
        cutoff = NOW - timedelta(days=9)
        assert await learning.purge_expired() == sum(1 for m in channel.messages.values() if m.at < cutoff) > 0
    assert sorted(await stored_ids(db)) == sorted(m for m in channel.messages if channel.messages[m].at >= NOW
                                                  - timedelta(days=9))
    documents = await indexed(db)
    assert documents == await rebuilt_from_scratch(db)
    assert documents and all("2026-11-04" in title for title, _, _ in documents.values())


async def test_the_bot_leaving_a_channel_purges_everything_learnt_from_it(db: Database) -> None:
    async with service(db, now=clock) as learning:
        learning.attach("slack", PagedHistory({"C1": incidents()}))
        await learning.add(PLACE, since_days=30, keep_days=None)
        await learning.run_due()
        assert await indexed(db)
        await learning.take(ChannelChange(kind="left", place=PLACE))
        assert await learning.get(PLACE) is None
    assert await indexed(db) == {} and await stored_ids(db) == []
    async with db.connection() as conn:
        assert await (await conn.execute("SELECT count(*) FROM sources")).fetchone() == (0,)
