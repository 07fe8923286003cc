"""One channel's history read through its door, newest page first, then its threads, each page with its checkpoint."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from core.learning.documents import thread_key
from core.learning.keeper import keep
from core.learning.model import ChannelMessage, HistoryPage, LearningRefused
from core.learning.ports import ChannelHistory
from core.learning.rebuilds import Rebuilds
from core.store import learned_channels as store
from core.store.db import Database

T = TypeVar("T")
log = logging.getLogger(__name__)
# Scans in a row a thread's replies may fail before that thread is passed over.
THREAD_ATTEMPTS = 3
# The backfill's second look at what came since it started reaches this far before its start (clocks differ).
TAIL_MARGIN = timedelta(minutes=1)


class ScanFailed(Exception):
    """The platform failed a read: `sentence` says so; the scan is tried again later from its checkpoint."""

    def __init__(self, sentence: str) -> None:
        super().__init__(sentence)
        self.sentence = sentence


def _iso(at: datetime) -> str:
    return at.astimezone(timezone.utc).isoformat()


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def new_scan(channel: store.ChannelRow, *, now: datetime, rescan_days: int | None, done: int) -> dict[str, Any]:
    """A fresh checkpoint: the backfill's (rescan_days None) or a catch-up's, which deletes what a read of the last
    rescan_days no longer lists and re-reads those days' threads."""
    checkpoint: dict[str, Any] = {
        "phase": "history", "cursor": "", "oldest": _iso(now - timedelta(days=channel.since_days)),
        "started": _iso(now), "done_at_start": done, "upper": _iso(now), "upper_ids": [],
    }
    if rescan_days is not None:
        checkpoint["rescan_from"] = _iso(now - timedelta(days=rescan_days))
    return checkpoint


class ChannelScan:
    """Runs one channel's scan from its checkpoint to its end (or its first platform failure)."""

    def __init__(
        self, db: Database, rebuilds: Rebuilds, history: ChannelHistory, channel: store.ChannelRow, *, cap: int,
        now: Callable[[], datetime],
    ) -> None:
        self.db = db
        self.rebuilds = rebuilds
        self.history = history
        self.channel = channel
        self.cap = cap
        self.now = now
        self.checkpoint = {k: v for k, v in channel.checkpoint.items() if k not in ("failures", "retry_at")}
        self.pages = 0
        self.done = channel.done  # messages stored so far (counted exactly once the scan ends)
        self._indexing: list[asyncio.Future[None]] = []  # the last page's documents, built while the next is read

    @property
    def source_id(self) -> int:
        return self.channel.source_id

    async def run(self) -> bool:
        """Read until the scan is done; False when the channel was removed meanwhile. ScanFailed on a failure."""
        steps = {"history": self._history_page, "threads": self._threads_page, "replies": self._replies_page}
        try:
            while self.checkpoint.get("phase") in steps:
                if not await steps[self.checkpoint["phase"]]():
                    return False
                self.pages += 1
        finally:
            await self._index(set())
        return True

    async def _index(self, documents: set[str]) -> None:
        """Build these documents while the next page is read; first wait for the previous page's, so at most one
        page's documents wait at once (the platform's pace, not the embedder's, bounds the backfill)."""
        waiting, self._indexing = self._indexing, []
        if waiting:
            await asyncio.gather(*(asyncio.shield(w) for w in waiting))
        if documents:
            self._indexing = self.rebuilds.want(self.source_id, documents, urgent=True)

    async def _read(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except asyncio.CancelledError:
            raise
        except LearningRefused as refused:
            raise ScanFailed(refused.sentence) from None
        except Exception as error:  # noqa: BLE001 — any platform failure: retried later, the checkpoint kept
            raise ScanFailed(
                f"Reading the history of #{self.channel.name} failed ({type(error).__name__}); it is tried again "
                "later from where it stopped."
            ) from None

    async def _history_page(self) -> bool:
        place, cp = self.channel.place, self.checkpoint
        oldest = _at(cp.get("tail_from") or cp["oldest"])
        page: HistoryPage = await self._read(lambda: self.history.history(
            place.workspace, place.channel, oldest=oldest, cursor=cp["cursor"]))
        messages = list(page.messages)
        async with self.db.connection() as conn:
            if await store.lock_channel(conn, self.source_id) is None:
                return False
            kept = await keep(conn, self.source_id, messages, cap=self.cap)
            self.done += kept.added
            touched = kept.touched | await self._deleted_since_read(conn, messages, last=not page.next_cursor)
            pending = await self._unread_roots(conn, messages)
            page_oldest = min((m.at for m in messages), default=_at(cp["upper"]))
            cp.update(cursor=page.next_cursor, upper=_iso(page_oldest),
                      upper_ids=[m.id for m in messages if m.at == page_oldest])
            if not page.next_cursor:
                self._after_history()
            await self._save(conn, fraction=self._covered(page_oldest) if page.next_cursor else 1.0, estimate=True)
        # A thread's document is built once its replies are read.
        await self._index(touched - {thread_key(root) for root in pending})
        return True

    async def _unread_roots(self, conn: Any, messages: Sequence[ChannelMessage]) -> set[str]:
        """The page's roots whose replies are still to be read (their thread's document is built after them)."""
        roots = [m.id for m in messages if m.reply_count > 0 or m.thread == m.id]
        if not roots:
            return set()
        return {i for i, s in (await store.known(conn, self.source_id, roots)).items() if not s.replies_read}

    def _after_history(self) -> None:
        """A backfill reads what came since it started once more: a live event in a process that had not yet seen
        the channel chosen (another process added it moments ago) was dropped, and history has it."""
        cp = self.checkpoint
        if "rescan_from" in cp or cp.get("tail_from"):
            cp.update(phase="threads", cursor="")
        else:
            cp.update(cursor="", tail_from=_iso(_at(cp["started"]) - TAIL_MARGIN))

    async def _deleted_since_read(self, conn: Any, messages: Sequence[ChannelMessage], *, last: bool) -> set[str]:
        """In a catch-up's re-scan window: the stored channel-level messages this page's span held that it no
        longer lists (deleted while nobody listened)."""
        cp = self.checkpoint
        if "rescan_from" not in cp:
            return set()
        rescan_from, upper = _at(cp["rescan_from"]), _at(cp["upper"])
        lower = _at(cp["oldest"]) if last else min((m.at for m in messages), default=upper)
        lower = max(lower, rescan_from)
        if lower > upper:
            return set()
        present = [m.id for m in messages] + list(cp.get("upper_ids", []))
        return await store.delete_absent_top_level(conn, self.source_id, lower=lower, upper=upper, present=present)

    def _covered(self, page_oldest: datetime) -> float:
        cp = self.checkpoint
        start, oldest = _at(cp["started"]), _at(cp["oldest"])
        span = (start - oldest).total_seconds()
        return 1.0 if span <= 0 else min(1.0, max(0.01, (start - page_oldest).total_seconds() / span))

    async def _threads_page(self) -> bool:
        place, cp = self.channel.place, self.checkpoint
        oldest = _at(cp["oldest"])
        page = await self._read(lambda: self.history.threads(
            place.workspace, place.channel, oldest=oldest, cursor=cp["cursor"]))
        roots = [dataclasses.replace(m, thread=m.thread or m.id) for m in page.messages]
        async with self.db.connection() as conn:
            if await store.lock_channel(conn, self.source_id) is None:
                return False
            kept = await keep(conn, self.source_id, roots, cap=self.cap)
            self.done += kept.added
            await store.reread(conn, self.source_id, [m.id for m in roots])
            cp.update(cursor=page.next_cursor)
            if not page.next_cursor:
                cp.update(phase="replies", cursor="")
            await self._save(conn, fraction=None, estimate=True)
        await self._index({k for k in kept.touched if not k.startswith("thread:")})
        return True

    async def _replies_page(self) -> bool:
        place, cp = self.channel.place, self.checkpoint
        if not cp.get("thread"):
            async with self.db.connection() as conn:
                roots = await store.roots_to_read(conn, self.source_id, limit=1)
            if not roots:
                return await self._finish()
            cp.update(thread=roots[0], cursor="", seen=[], thread_from=_iso(self.now()))
        root = cp["thread"]
        try:
            page = await self._read(lambda: self.history.replies(place.workspace, place.channel, root,
                                                                 cursor=cp["cursor"]))
        except ScanFailed as failed:
            return await self._replies_failed(root, failed)
        messages = [dataclasses.replace(m, thread=root) for m in page.messages]
        async with self.db.connection() as conn:
            if await store.lock_channel(conn, self.source_id) is None:
                return False
            kept = await keep(conn, self.source_id, messages, cap=self.cap)
            self.done += kept.added
            touched = kept.touched
            cp["seen"] = sorted({*cp.get("seen", []), *(m.id for m in messages)})
            cp["cursor"] = page.next_cursor
            if not page.next_cursor:
                touched |= await store.delete_absent_replies(
                    conn, self.source_id, root, cp["seen"], before=_at(cp.get("thread_from") or _iso(self.now())))
                await store.mark_replies_read(conn, self.source_id, root)
                cp.update(thread="", cursor="", seen=[], thread_failures=0)
            await self._save(conn, fraction=None)
        if not page.next_cursor:
            await self._index(touched)
        return True

    async def _replies_failed(self, root: str, failed: ScanFailed) -> bool:
        """A thread whose replies fail THREAD_ATTEMPTS scans in a row (its root deleted on the platform meanwhile)
        is passed over, so one thread never holds the channel in 'error'; a first failure is the channel's."""
        cp = self.checkpoint
        cp["thread_failures"] = int(cp.get("thread_failures", 0)) + 1
        async with self.db.connection() as conn:
            if cp["thread_failures"] >= THREAD_ATTEMPTS:
                log.warning("passing over thread %s of %s: %s", root, self.channel.place.key, failed.sentence)
                await store.mark_replies_read(conn, self.source_id, root)
                cp.update(thread="", cursor="", seen=[], thread_failures=0)
            await self._save(conn, fraction=None)
        if cp.get("thread"):
            raise failed
        return True

    async def _finish(self) -> bool:
        await self._index(set())  # live only once every document read is searchable
        async with self.db.connection() as conn:
            if await store.lock_channel(conn, self.source_id) is None:
                return False
            done = await store.count_messages(conn, self.source_id)
            self.checkpoint = {"phase": "done", "scanned_at": _iso(self.now())}
            await store.save_progress(conn, self.source_id, store.Progress(
                checkpoint=self.checkpoint, state="live", done=done, total=done))
        return True

    async def _save(self, conn: Any, *, fraction: float | None, estimate: bool = False) -> None:
        """The checkpoint after a page, with the count so far and (`estimate`: while history is read, from the share
        of the window covered and the replies the roots announce) the whole; replies pages keep the estimate."""
        total = None
        if estimate:
            read = self.done if fraction is None else max(self.done, round(self.done / fraction))
            total = read + await store.unread_replies(conn, self.source_id)
        state = "live" if "rescan_from" in self.checkpoint else "backfilling"  # a catch-up's channel was read whole
        await store.save_progress(conn, self.source_id, store.Progress(
            checkpoint=self.checkpoint, state=state, done=self.done, total=total))
