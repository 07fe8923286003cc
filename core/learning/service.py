"""ChannelLearningService: chosen channels learnt from — added, removed, backfilled, kept current from live changes, purged."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Protocol

from core.learning.backfill import ChannelScan, ScanFailed, new_scan
from core.learning.indexer import ChannelIndexer
from core.learning.keeper import keep
from core.learning.model import ChannelChange, ChannelMessage, ChannelPlace, LearnedChannel, LearningRefused
from core.learning.ports import ChannelHistory
from core.learning.rebuilds import REBUILD_INTERVAL_S, Rebuilds
from core.retrieval.embeddings import EmbeddingProvider
from core.retrieval.source_lease import SourceBusy, SourceLease, new_holder
from core.store import learned_channels as store
from core.store.channel_config import record_change
from core.store.db import Database

log = logging.getLogger(__name__)

# How often the chosen channels are read again, so a channel another process (or the CLI) added is seen.
CHOSEN_REFRESH_S = 5.0
# The field learning's changes are recorded under in a channel's settings history (`relaybot channels history`).
AUDIT_FIELD = "learn"
# A failed scan is tried again after this, doubled per failure in a row, at most RETRY_MAX_S.
RETRY_BASE_S = 60.0
RETRY_MAX_S = 3600.0
# Channels scanned at once by one process (each paced by its platform's door), and how often a run under way looks
# for channels that got work meanwhile.
CHANNELS_AT_ONCE = 4
DUE_RECHECK_S = 5.0

DIRECT_REFUSED = "Direct messages and group DMs are never learned from."


def no_history_sentence(platform: str) -> str:
    return (f"{platform} is not connected in this process, so the channel cannot be checked; add it where the bot "
            "runs, or from the CLI with the platform's settings set.")


class LearningSettings(Protocol):
    learn_since_days: int
    learn_rescan_days: int
    learn_stretch_messages: int


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class ChannelLearningService:
    """The engine's side of learning from channels (core.learning.ports.ChannelLearning), and its jobs."""

    def __init__(
        self, db: Database, *, embedder: EmbeddingProvider | None, settings: LearningSettings,
        rebuild_interval_s: float = REBUILD_INTERVAL_S, chosen_refresh_s: float = CHOSEN_REFRESH_S,
        due_recheck_s: float = DUE_RECHECK_S, now: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.db = db
        self.settings = settings
        self.now = now
        self.indexer = ChannelIndexer(db, embedder=embedder, permalink=self._permalink)
        self.rebuilds = Rebuilds(self.indexer.rebuild, interval_s=rebuild_interval_s)
        self.chosen_refresh_s = chosen_refresh_s
        self.due_recheck_s = due_recheck_s
        self.dropped = 0  # live changes about channels nobody chose, dropped in memory
        self._histories: dict[str, ChannelHistory] = {}
        self._chosen: dict[str, int] | None = None
        self._chosen_at = float("-inf")
        self._reload: asyncio.Task[None] | None = None
        self._started = now()
        self._caught_up: set[int] = set()
        self._holder = new_holder()
        self._running = asyncio.Lock()

    def attach(self, platform: str, history: ChannelHistory) -> None:
        """The history door of a platform this process runs (an adapter that LearnsChannels)."""
        self._histories[platform] = history

    # -- live changes ------------------------------------------------------------------------------------------

    async def take(self, change: ChannelChange) -> None:
        """One live change; about a channel nobody chose, dropped without reading the database."""
        source_id = (await self._chosen_now()).get(change.place.key)
        if source_id is None:
            self.dropped += 1
            return
        if change.kind == "message" and change.message is not None:
            async with self.db.connection() as conn:
                kept = await keep(conn, source_id, [change.message], cap=self.settings.learn_stretch_messages)
            self.rebuilds.want(source_id, kept.touched)
        elif change.kind == "deleted" and change.message_id:
            async with self.db.connection() as conn:
                # A Discord thread deleted takes its replies with it; a root's message deleted alone leaves its thread.
                documents = await store.delete_messages(conn, source_id, [change.message_id], threads=change.thread_gone)
            await self.rebuilds.now(source_id, documents)  # gone from retrieval before this returns
        elif change.kind == "renamed" and change.name:
            await store.set_name(self.db, source_id, change.name.lstrip("#"))
        elif change.kind == "left":
            await self.remove(change.place)
            log.info("learning from %s stopped: the bot left it, or it was archived or deleted; what was learnt is "
                     "deleted", change.place.key)

    def chosen(self, place: ChannelPlace) -> bool:
        """Whether anyone chose the channel, from memory (no database read), for an adapter to ask before it spends
        a platform call on a change (a message's author's name); True until the chosen channels are first read."""
        if self._chosen is None:
            return True
        self._refresh_if_stale()
        return place.key in self._chosen

    async def _chosen_now(self) -> dict[str, int]:
        """The chosen channels from memory, read again in the background once older than chosen_refresh_s."""
        if self._chosen is None:
            await self._load_chosen()
        self._refresh_if_stale()
        assert self._chosen is not None
        return self._chosen

    def _refresh_if_stale(self) -> None:
        if time.monotonic() - self._chosen_at <= self.chosen_refresh_s or self._reload is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # asked outside the event loop: the next change on it reads them again
        self._reload = loop.create_task(self._load_chosen(), name="learning-chosen")
        self._reload.add_done_callback(self._reloaded)

    def _reloaded(self, task: asyncio.Task[None]) -> None:
        self._reload = None
        if not task.cancelled() and task.exception() is not None:
            log.warning("could not read the chosen channels again: %s", type(task.exception()).__name__)

    async def _load_chosen(self) -> None:
        self._chosen_at = time.monotonic()
        self._chosen = await store.chosen(self.db)

    async def settled(self) -> None:
        """Return once every live change taken so far is searchable (and a read of the chosen channels under way
        has ended)."""
        if self._reload is not None:
            await asyncio.wait([self._reload])
        await self.rebuilds.settled()

    async def close(self) -> None:
        if self._reload is not None:
            self._reload.cancel()
        await self.rebuilds.close()

    # -- choosing ----------------------------------------------------------------------------------------------

    async def add(
        self, place: ChannelPlace, *, since_days: int | None, keep_days: int | None,
        history: ChannelHistory | None = None, by: str = "",
    ) -> LearnedChannel:
        """Start learning from a channel (or change how far back and how long); LearningRefused with the platform's
        sentence when it cannot be (a DM, the bot not in it, no Message Content intent)."""
        door = history or self._histories.get(place.platform)
        if door is None:
            raise LearningRefused(no_history_sentence(place.platform))
        info = await door.info(place.workspace, place.channel)
        if info.direct:
            raise LearningRefused(DIRECT_REFUSED)
        before = await store.get_channel(self.db, place) if by else None
        row = await store.add_channel(
            self.db, place, name=info.name.lstrip("#"), private=info.private,
            since_days=since_days or self.settings.learn_since_days, keep_days=keep_days,
        )
        if self._chosen is not None:
            self._chosen[place.key] = row.source_id
        log.info("learning from %s (#%s), %d days back", place.key, row.name, row.since_days)
        if by:
            await self._audit(place, _learnt(before), _learnt(row), by)
        return self.view(row)

    async def remove(self, place: ChannelPlace, *, by: str = "") -> bool:
        """Stop learning from a channel and delete everything learnt from it; False when it was not chosen."""
        before = await store.get_channel(self.db, place) if by else None
        removed = await store.remove_channel(self.db, place)
        if self._chosen is not None:
            self._chosen.pop(place.key, None)
        if removed and by:
            await self._audit(place, _learnt(before), None, by)
        return removed

    async def _audit(self, place: ChannelPlace, before: dict[str, int | None] | None,
                     after: dict[str, int | None] | None, by: str) -> None:
        if before != after:
            await record_change(self.db, scope=place.key, field=AUDIT_FIELD, before=before, after=after, actor=by)

    async def get(self, place: ChannelPlace) -> LearnedChannel | None:
        row = await store.get_channel(self.db, place)
        return None if row is None else self.view(row)

    async def list(self, *, platform: str | None = None, workspace: str | None = None) -> list[LearnedChannel]:
        return [self.view(row) for row in await store.list_channels(self.db, platform=platform, workspace=workspace)]

    def view(self, row: store.ChannelRow) -> LearnedChannel:
        """A chosen channel as the CLI and admin views show it, with the backfill's time left at its pace so far."""
        return LearnedChannel(
            place=row.place, name=row.name, private=row.private, since_days=row.since_days, keep_days=row.keep_days,
            state=row.state, error=row.error, done=row.done, total=row.total, eta_s=self._eta(row),
            added_at=row.added_at,
        )  # type: ignore[arg-type]  # state is checked by the table's constraint

    def _eta(self, row: store.ChannelRow) -> float | None:
        cp = row.checkpoint
        if row.state == "live" or "started" not in cp or row.total is None:
            return None
        read = row.done - int(cp.get("done_at_start", 0))
        elapsed = (row.updated_at - datetime.fromisoformat(cp["started"])).total_seconds()
        if read <= 0 or elapsed <= 0:
            return None
        return max(0.0, elapsed * (row.total - row.done) / read)

    # -- jobs --------------------------------------------------------------------------------------------------

    async def run_due(self) -> int:
        """Backfill, catch up or retry each channel with work whose platform this process runs, a few channels at
        once and one process per channel (its source's lease); returns how many channels were worked on. While
        scans go on, channels that get work meanwhile (one just added) are started too; a cancel stops every scan,
        each where its last page's checkpoint stands."""
        if self._running.locked():
            return 0  # the previous run is still reading
        async with self._running:
            scans: dict[int, asyncio.Task[bool]] = {}
            try:
                while True:
                    await self._start_due(scans)
                    going = [task for task in scans.values() if not task.done()]
                    if not going:
                        break
                    await asyncio.wait(going, timeout=self.due_recheck_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in scans.values():
                    task.cancel()
                await asyncio.gather(*scans.values(), return_exceptions=True)
            return sum(1 for task in scans.values() if not task.cancelled() and task.result())

    async def _start_due(self, scans: dict[int, asyncio.Task[bool]]) -> None:
        """Start a scan for each channel with work not scanned in this run yet, up to CHANNELS_AT_ONCE going."""
        channels = await store.list_channels(self.db)
        # The chosen channels as read now, before any scan starts: a live change from now on is taken, and one before
        # is in the history the scan reads (one added by another process would otherwise be dropped until a reload).
        self._chosen, self._chosen_at = {c.place.key: c.source_id for c in channels}, time.monotonic()
        for channel in channels:
            going = sum(1 for task in scans.values() if not task.done())
            history = self._histories.get(channel.place.platform)
            if going >= CHANNELS_AT_ONCE or channel.source_id in scans or history is None or not self._due(channel):
                continue
            scans[channel.source_id] = asyncio.create_task(
                self._work_guarded(channel, history), name=f"learn-{channel.place.key}")

    async def _work_guarded(self, channel: store.ChannelRow, history: ChannelHistory) -> bool:
        """One channel's work; a failure other than the platform's (the database's) is logged and left to the next
        run, so it never stops the other channels' scans."""
        try:
            return await self._work_on(channel, history)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 — the checkpoint of its last stored page stands
            log.exception("learning from %s stopped; the next run goes on from its checkpoint", channel.place.key)
            return False

    def _due(self, channel: store.ChannelRow) -> bool:
        cp = channel.checkpoint
        if channel.state == "error":
            return "retry_at" not in cp or datetime.fromisoformat(cp["retry_at"]) <= self.now()
        if channel.state == "backfilling" or cp.get("phase") != "done":
            return True
        if channel.source_id in self._caught_up:
            return False
        # Once per process start: unless another process caught it up since this one started.
        return datetime.fromisoformat(cp.get("scanned_at", "1970-01-01T00:00:00+00:00")) <= self._started

    async def _work_on(self, channel: store.ChannelRow, history: ChannelHistory) -> bool:
        try:
            lease = await SourceLease.take(self.db, channel.source_id, holder=self._holder)
        except SourceBusy:
            return False
        async with lease:
            fresh = await store.get_channel(self.db, channel.place)
            if fresh is None or not self._due(fresh):
                return False
            await self._scan(fresh, history)
        return True

    async def _scan(self, channel: store.ChannelRow, history: ChannelHistory) -> None:
        phase = channel.checkpoint.get("phase")
        if phase in (None, "done"):
            channel = await self._start_scan(channel, catch_up=phase == "done")
        scan = ChannelScan(self.db, self.rebuilds, history, channel, cap=self.settings.learn_stretch_messages,
                           now=self.now)
        try:
            finished = await scan.run()
        except ScanFailed as failed:
            log.warning("learning from %s: %s", channel.place.key, failed.sentence)
            await store.record_failure(self.db, channel.source_id, failed.sentence, now=self.now(),
                                       base_s=RETRY_BASE_S, max_s=RETRY_MAX_S)
            return
        if finished:
            self._caught_up.add(channel.source_id)

    async def _start_scan(self, channel: store.ChannelRow, *, catch_up: bool) -> store.ChannelRow:
        """A backfill's first checkpoint, or after a restart a catch-up's: history since the channel's window, each
        thread with newer replies, and the last LEARN_RESCAN_DAYS read again for edits and deletes."""
        rescan = self.settings.learn_rescan_days if catch_up else None
        async with self.db.connection() as conn:
            checkpoint = new_scan(channel, now=self.now(), rescan_days=rescan, done=await store.count_messages(
                conn, channel.source_id))
            if catch_up:
                await store.reread_roots_since(conn, channel.source_id, datetime.fromisoformat(checkpoint["rescan_from"]))
            await store.save_progress(conn, channel.source_id, store.Progress(
                checkpoint=checkpoint, state="live" if catch_up else "backfilling"))
        return dataclasses.replace(channel, checkpoint=checkpoint)

    async def purge_expired(self) -> int:
        """Retention: for each channel kept for N days, delete its messages older than that (their documents rebuilt
        or deleted); returns how many messages went."""
        purged = 0
        for channel in await store.list_channels(self.db):
            if channel.keep_days is None:
                continue
            count, documents = await store.delete_older(
                self.db, channel.source_id, self.now() - timedelta(days=channel.keep_days))
            await self.rebuilds.now(channel.source_id, documents)
            purged += count
        return purged

    async def _permalink(self, channel: store.ChannelRow, message: ChannelMessage) -> str:
        history = self._histories.get(channel.place.platform)
        if history is None:
            return ""
        return await history.permalink(channel.place.workspace, channel.place.channel, message)


def _learnt(row: store.ChannelRow | None) -> dict[str, int | None] | None:
    """What the settings history shows of a channel's learning: how far back and how long, or None (off)."""
    return None if row is None else {"since_days": row.since_days, "keep_days": row.keep_days}

