"""Messages kept in a transaction: each put in its document (its thread's, or a stretch of its day), the documents touched named."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta, timezone

from psycopg import AsyncConnection

from core.learning.documents import thread_key
from core.learning.model import ChannelMessage
from core.learning.stretches import Slot, place_in_day
from core.store import learned_channels as store


def _day_start(at: datetime) -> datetime:
    return datetime.combine(at.astimezone(timezone.utc).date(), time(0), tzinfo=timezone.utc)


@dataclass(frozen=True, kw_only=True)
class Kept:
    """What keeping some messages did: every document whose content changed (where a message went, where it was,
    where a split moved others), and how many of the messages were new."""

    touched: set[str]
    added: int


async def keep(conn: AsyncConnection, source_id: int, messages: Sequence[ChannelMessage], *, cap: int) -> Kept:
    """Insert or update `messages` in the caller's transaction."""
    latest = {m.id: m for m in messages}  # a page may repeat a message (a root in its own replies)
    messages = list(latest.values())
    roots = {m.thread for m in messages if m.thread and m.thread != m.id}
    known = await store.known(conn, source_id, [*latest, *roots])
    touched: set[str] = set()
    placed: list[store.Placed] = []
    outside: list[ChannelMessage] = []
    for message in messages:
        before = known.get(message.id)
        thread = message.thread or (before.message.thread if before is not None else "")
        if thread:
            placed.append(store.Placed(message=message, thread=thread, document=thread_key(thread)))
        elif before is not None:
            placed.append(store.Placed(message=message, thread="", document=before.document))
        else:
            outside.append(message)
        if before is not None:
            touched.add(before.document)
    for root in roots - set(latest):
        # A reply to a message stored outside any thread: the message becomes its thread's root.
        stored = known.get(root)
        if stored is not None and not stored.message.thread:
            touched.add(stored.document)
            placed.append(store.Placed(message=stored.message, thread=root, document=thread_key(root)))
    moved, left = await _place_outside(conn, source_id, outside, cap=cap)
    touched.update(left)
    for message in outside:
        placed.append(store.Placed(message=message, thread="", document=moved.pop(message.id)))
    ids = {p.message.id for p in placed}
    moved = {message_id: document for message_id, document in moved.items() if message_id not in ids}
    await store.move(conn, source_id, moved)
    await store.write_messages(conn, source_id, placed)
    touched.update(moved.values())
    touched.update(p.document for p in placed)
    return Kept(touched=touched, added=sum(1 for message_id in latest if message_id not in known))


async def _place_outside(
    conn: AsyncConnection, source_id: int, messages: Sequence[ChannelMessage], *, cap: int
) -> tuple[dict[str, str], set[str]]:
    """The stretch of each new message outside threads and of each stored one a split moved, and the stretches
    those moved out of."""
    by_day: dict[datetime, list[ChannelMessage]] = defaultdict(list)
    for message in messages:
        by_day[_day_start(message.at)].append(message)
    documents: dict[str, str] = {}
    left: set[str] = set()
    for start, day in by_day.items():
        existing = await store.day_outside_threads(conn, source_id, start, start + timedelta(days=1))
        slots = [Slot(at=s.message.at, id=s.message.id, document=s.document) for s in existing]
        placed = place_in_day(slots, [Slot(at=m.at, id=m.id) for m in day], cap=cap)
        was = {s.message.id: s.document for s in existing}
        for message_id, document in placed.items():
            if message_id in was:
                left.add(was[message_id])
            documents[message_id] = document
    return documents, left
