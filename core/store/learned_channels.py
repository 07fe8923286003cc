"""Learned channels in Postgres: the chosen channels with their checkpoints and progress, and the messages read from them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from core.learning.model import ChannelMessage, ChannelPlace
from core.requests import team_key
from core.store.db import Database
from core.text_safety import storable

_CHANNEL_COLUMNS = (
    "c.source_id, c.platform, c.workspace, c.channel, c.name, c.private, c.since_days, c.keep_days, c.state,"
    " c.error, c.checkpoint, c.done, c.total, c.added_at, c.updated_at"
)
_MESSAGE_COLUMNS = (
    "id, thread, author_id, author_name, text, at, files, permalink, reply_count, latest_reply, by_bot, document,"
    " replies_read"
)


def source_name(place: ChannelPlace) -> str:
    """A learned channel's source name: stable across renames, one per channel."""
    return f"channel:{place.key}"


@dataclass(frozen=True, kw_only=True)
class ChannelRow:
    """One chosen channel as stored."""

    source_id: int
    place: ChannelPlace
    name: str
    private: bool
    since_days: int
    keep_days: int | None
    state: str
    error: str
    checkpoint: dict[str, Any]
    done: int
    total: int | None
    added_at: datetime
    updated_at: datetime


@dataclass(frozen=True, kw_only=True)
class StoredMessage:
    """A message as kept, with the document it is in."""

    message: ChannelMessage
    document: str
    replies_read: bool = False


@dataclass(frozen=True, kw_only=True)
class Placed:
    """A message to write with where it goes: its thread (a root keeps its thread once it has one) and document."""

    message: ChannelMessage
    thread: str
    document: str


@dataclass(frozen=True, kw_only=True)
class Progress:
    """What one backfill step leaves behind, written with the page it follows."""

    checkpoint: dict[str, Any]
    state: str
    error: str = ""
    done: int | None = None
    total: int | None = field(default=None)


def _channel(row: Sequence[Any]) -> ChannelRow:
    return ChannelRow(
        source_id=int(row[0]), place=ChannelPlace(platform=row[1], workspace=row[2], channel=row[3]), name=row[4],
        private=bool(row[5]), since_days=int(row[6]), keep_days=row[7], state=row[8], error=row[9],
        checkpoint=dict(row[10] or {}), done=int(row[11]), total=row[12], added_at=row[13], updated_at=row[14],
    )


def _stored(row: Sequence[Any]) -> StoredMessage:
    message = ChannelMessage(
        id=row[0], thread=row[1], author_id=row[2], author_name=row[3], text=row[4], at=row[5],
        files=tuple(row[6] or ()), permalink=row[7], reply_count=int(row[8]), latest_reply=row[9], by_bot=bool(row[10]),
    )
    return StoredMessage(message=message, document=row[11], replies_read=bool(row[12]))


async def add_channel(
    db: Database, place: ChannelPlace, *, name: str, private: bool, since_days: int, keep_days: int | None
) -> ChannelRow:
    """Choose a channel (its source and row, state 'backfilling'), or change how far back and how long for one
    chosen already: reading further back than before starts its backfill again (what is stored stays)."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "INSERT INTO sources (name, kind, uri, exposure, owner, restricted) VALUES (%s, 'channel', '', 'prefetch', %s,"
            " true) ON CONFLICT (name) DO UPDATE SET updated_at = now() RETURNING id",
            (source_name(place), team_key(place.platform, place.workspace)),
        )
        row = await cursor.fetchone()
        assert row is not None
        cursor = await conn.execute(
            "INSERT INTO learned_channels AS c (source_id, platform, workspace, channel, name, private, since_days,"
            " keep_days) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (source_id) DO UPDATE SET"
            " name = EXCLUDED.name, private = EXCLUDED.private, since_days = EXCLUDED.since_days,"
            " keep_days = EXCLUDED.keep_days, updated_at = now(),"
            " state = CASE WHEN EXCLUDED.since_days > c.since_days THEN 'backfilling' ELSE c.state END,"
            " checkpoint = CASE WHEN EXCLUDED.since_days > c.since_days THEN '{}'::jsonb ELSE c.checkpoint END"
            f" RETURNING {_CHANNEL_COLUMNS}",
            (int(row[0]), place.platform, place.workspace, place.channel, storable(name), private, since_days, keep_days),
        )
        added = await cursor.fetchone()
    assert added is not None
    return _channel(added)


async def remove_channel(db: Database, place: ChannelPlace) -> bool:
    """Delete the channel's source, so every message, document, chunk and vector learnt from it goes too."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "DELETE FROM sources WHERE id = (SELECT source_id FROM learned_channels WHERE platform = %s AND"
            " workspace = %s AND channel = %s) RETURNING id",
            (place.platform, place.workspace, place.channel),
        )
        return await cursor.fetchone() is not None


async def get_channel(db: Database, place: ChannelPlace) -> ChannelRow | None:
    async with db.connection() as conn:
        cursor = await conn.execute(
            f"SELECT {_CHANNEL_COLUMNS} FROM learned_channels c WHERE c.platform = %s AND c.workspace = %s"
            " AND c.channel = %s",
            (place.platform, place.workspace, place.channel),
        )
        row = await cursor.fetchone()
    return None if row is None else _channel(row)


async def list_channels(db: Database, *, platform: str | None = None, workspace: str | None = None) -> list[ChannelRow]:
    """Every chosen channel (of a platform, of a team), by team and name."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            f"SELECT {_CHANNEL_COLUMNS} FROM learned_channels c WHERE (%s::text IS NULL OR c.platform = %s::text)"
            " AND (%s::text IS NULL OR c.workspace = %s::text) ORDER BY c.platform, c.workspace, c.name, c.channel",
            (platform, platform, workspace, workspace),
        )
        return [_channel(row) for row in await cursor.fetchall()]


async def chosen(db: Database) -> dict[str, int]:
    """Every chosen channel's place key with its source id: what live changes are matched against in memory."""
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT platform, workspace, channel, source_id FROM learned_channels")
        return {f"{p}:{w}:{c}": int(source_id) for p, w, c, source_id in await cursor.fetchall()}


async def set_name(db: Database, source_id: int, name: str) -> None:
    """A renamed channel's name, and the titles of the documents learnt from it (`#old — …` → `#new — …`)."""
    name = storable(name)
    async with db.connection() as conn:
        cursor = await conn.execute(
            "UPDATE learned_channels SET name = %s, updated_at = now() WHERE source_id = %s"
            " RETURNING (SELECT name FROM learned_channels WHERE source_id = %s)",
            (name, source_id, source_id),
        )
        row = await cursor.fetchone()
        if row is None or row[0] == name:
            return
        old, new = f"#{row[0]} — ", f"#{name} — "
        for table in ("documents", "chunks"):
            await conn.execute(
                f"UPDATE {table} SET title = %s || substr(title, %s) WHERE source_id = %s AND starts_with(title, %s)",
                (new, len(old) + 1, source_id, old),
            )


async def save_progress(conn: AsyncConnection, source_id: int, progress: Progress) -> None:
    """The checkpoint, state and counts after a step, in the caller's transaction (the page's own)."""
    await conn.execute(
        "UPDATE learned_channels SET checkpoint = %s::jsonb, state = %s, error = %s, done = coalesce(%s, done),"
        " total = coalesce(%s, total), updated_at = now() WHERE source_id = %s",
        (json.dumps(progress.checkpoint), progress.state, progress.error, progress.done, progress.total, source_id),
    )


async def lock_channel(conn: AsyncConnection, source_id: int) -> ChannelRow | None:
    """The channel's row, locked for the caller's transaction; None once it was removed."""
    cursor = await conn.execute(
        f"SELECT {_CHANNEL_COLUMNS} FROM learned_channels c WHERE c.source_id = %s FOR UPDATE", (source_id,)
    )
    row = await cursor.fetchone()
    return None if row is None else _channel(row)


async def known(conn: AsyncConnection, source_id: int, ids: Iterable[str]) -> dict[str, StoredMessage]:
    """The stored rows of these message ids."""
    cursor = await conn.execute(
        f"SELECT {_MESSAGE_COLUMNS} FROM channel_messages WHERE source_id = %s AND id = ANY(%s)",
        (source_id, sorted(set(ids))),
    )
    return {row[0]: _stored(row) for row in await cursor.fetchall()}


async def day_outside_threads(conn: AsyncConnection, source_id: int, start: datetime, end: datetime) -> list[StoredMessage]:
    """The channel messages outside threads from `start` to before `end` (one UTC day), in order."""
    cursor = await conn.execute(
        f"SELECT {_MESSAGE_COLUMNS} FROM channel_messages WHERE source_id = %s AND thread = '' AND at >= %s AND at < %s"
        " ORDER BY at, id",
        (source_id, start, end),
    )
    return [_stored(row) for row in await cursor.fetchall()]


async def write_messages(conn: AsyncConnection, source_id: int, placed: Sequence[Placed]) -> None:
    """Insert or update messages where `placed` puts them. A root's replies are read again when its latest reply
    or count moved; a permalink, reply count or latest reply a live event does not carry is kept."""
    if not placed:
        return
    async with conn.cursor() as cur:
        await cur.executemany(
            "INSERT INTO channel_messages AS m (source_id, id, thread, author_id, author_name, text, at, files,"
            " permalink, reply_count, latest_reply, by_bot, document) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
            " %s, %s, %s) ON CONFLICT (source_id, id) DO UPDATE SET thread = EXCLUDED.thread,"
            " author_id = EXCLUDED.author_id, author_name = EXCLUDED.author_name, text = EXCLUDED.text,"
            " at = EXCLUDED.at, files = EXCLUDED.files, by_bot = EXCLUDED.by_bot, document = EXCLUDED.document,"
            " permalink = CASE WHEN EXCLUDED.permalink = '' THEN m.permalink ELSE EXCLUDED.permalink END,"
            " reply_count = CASE WHEN EXCLUDED.reply_count = 0 AND EXCLUDED.latest_reply = '' THEN m.reply_count"
            "  ELSE EXCLUDED.reply_count END,"
            " latest_reply = CASE WHEN EXCLUDED.latest_reply = '' THEN m.latest_reply ELSE EXCLUDED.latest_reply END,"
            " replies_read = m.replies_read AND NOT (EXCLUDED.latest_reply <> '' AND"
            "  EXCLUDED.latest_reply IS DISTINCT FROM m.latest_reply) AND EXCLUDED.reply_count <= m.reply_count",
            [
                (source_id, p.message.id, p.thread, storable(p.message.author_id), storable(p.message.author_name),
                 storable(p.message.text), p.message.at, [storable(f) for f in p.message.files],
                 storable(p.message.permalink), p.message.reply_count, p.message.latest_reply, p.message.never_learned,
                 p.document)
                for p in placed
            ],
        )


async def move(conn: AsyncConnection, source_id: int, documents: dict[str, str]) -> None:
    """Put stored messages in other documents (a stretch split), by id."""
    if documents:
        await conn.execute(
            "UPDATE channel_messages m SET document = d.document FROM unnest(%s::text[], %s::text[]) AS d(id, document)"
            " WHERE m.source_id = %s AND m.id = d.id",
            (list(documents), list(documents.values()), source_id),
        )


async def delete_messages(conn: AsyncConnection, source_id: int, ids: Iterable[str], *, threads: bool = False) -> set[str]:
    """Delete these messages (`threads`: and the replies of the threads they are roots of); returns their documents."""
    wanted = sorted(set(ids))
    cursor = await conn.execute(
        "DELETE FROM channel_messages WHERE source_id = %s AND (id = ANY(%s) OR (%s AND thread = ANY(%s))) RETURNING document",
        (source_id, wanted, threads, wanted),
    )
    return {row[0] for row in await cursor.fetchall()}


async def delete_absent_top_level(
    conn: AsyncConnection, source_id: int, *, lower: datetime, upper: datetime, present: Iterable[str]
) -> set[str]:
    """Delete the channel-level messages (outside threads, or a thread's root) from `lower` to `upper` that a
    history read over that span did not list: deleted on the platform while nobody was listening."""
    cursor = await conn.execute(
        "DELETE FROM channel_messages WHERE source_id = %s AND at >= %s AND at <= %s AND (thread = '' OR thread = id)"
        " AND NOT (id = ANY(%s)) RETURNING document",
        (source_id, lower, upper, sorted(set(present))),
    )
    return {row[0] for row in await cursor.fetchall()}


async def delete_absent_replies(
    conn: AsyncConnection, source_id: int, thread: str, present: Iterable[str], *, before: datetime
) -> set[str]:
    """Delete the stored replies of a thread read whole that the read did not list (posted before the read began:
    a reply that came live meanwhile is not missing)."""
    cursor = await conn.execute(
        "DELETE FROM channel_messages WHERE source_id = %s AND thread = %s AND id <> thread AND at < %s"
        " AND NOT (id = ANY(%s)) RETURNING document",
        (source_id, thread, before, sorted(set(present))),
    )
    return {row[0] for row in await cursor.fetchall()}


async def document_messages(conn: AsyncConnection, source_id: int, document: str) -> list[StoredMessage]:
    """A document's messages in order."""
    cursor = await conn.execute(
        f"SELECT {_MESSAGE_COLUMNS} FROM channel_messages WHERE source_id = %s AND document = %s ORDER BY at, id",
        (source_id, document),
    )
    return [_stored(row) for row in await cursor.fetchall()]


async def set_permalink(db: Database, source_id: int, message_id: str, permalink: str) -> None:
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE channel_messages SET permalink = %s WHERE source_id = %s AND id = %s", (permalink, source_id, message_id)
        )


async def roots_to_read(conn: AsyncConnection, source_id: int, *, limit: int) -> list[str]:
    """Roots whose replies are still to be read, oldest first."""
    cursor = await conn.execute(
        "SELECT id FROM channel_messages WHERE source_id = %s AND NOT replies_read AND (reply_count > 0 OR thread = id)"
        " ORDER BY at, id LIMIT %s",
        (source_id, limit),
    )
    return [row[0] for row in await cursor.fetchall()]


async def unread_replies(conn: AsyncConnection, source_id: int) -> int:
    """The replies the roots still to read say they have (for the backfill's total)."""
    cursor = await conn.execute(
        "SELECT coalesce(sum(reply_count), 0) FROM channel_messages WHERE source_id = %s AND NOT replies_read"
        " AND (reply_count > 0 OR thread = id)",
        (source_id,),
    )
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


async def mark_replies_read(conn: AsyncConnection, source_id: int, root: str) -> None:
    await conn.execute(
        "UPDATE channel_messages SET replies_read = true WHERE source_id = %s AND id = %s", (source_id, root)
    )


async def reread_roots_since(conn: AsyncConnection, source_id: int, since: datetime) -> None:
    """Roots posted since `since` get their replies read again (the catch-up's re-scan of recent edits and deletes)."""
    await conn.execute(
        "UPDATE channel_messages SET replies_read = false WHERE source_id = %s AND at >= %s AND thread = id",
        (source_id, since),
    )


async def count_messages(conn: AsyncConnection, source_id: int) -> int:
    cursor = await conn.execute("SELECT count(*) FROM channel_messages WHERE source_id = %s", (source_id,))
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


async def delete_older(db: Database, source_id: int, before: datetime) -> tuple[int, set[str]]:
    """Retention: delete the messages posted before `before`; returns how many, and the documents they were in."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "DELETE FROM channel_messages WHERE source_id = %s AND at < %s RETURNING document", (source_id, before)
        )
        rows = await cursor.fetchall()
    return len(rows), {row[0] for row in rows}


async def document_keys(db: Database, source_id: int) -> set[str]:
    """Every document the channel's messages are in."""
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT DISTINCT document FROM channel_messages WHERE source_id = %s", (source_id,))
        return {row[0] for row in await cursor.fetchall()}


async def channel_of(conn: AsyncConnection, source_id: int) -> ChannelRow | None:
    """The chosen channel a source is, or None once removed."""
    cursor = await conn.execute(f"SELECT {_CHANNEL_COLUMNS} FROM learned_channels c WHERE c.source_id = %s", (source_id,))
    row = await cursor.fetchone()
    return None if row is None else _channel(row)


async def reread(conn: AsyncConnection, source_id: int, roots: Iterable[str]) -> None:
    """These roots get their replies read again (threads the platform lists as active)."""
    await conn.execute(
        "UPDATE channel_messages SET replies_read = false WHERE source_id = %s AND id = ANY(%s)",
        (source_id, sorted(set(roots))),
    )


async def record_failure(
    db: Database, source_id: int, sentence: str, *, now: datetime, base_s: float, max_s: float
) -> None:
    """A scan failed: state 'error' with the sentence, tried again after a back-off that doubles per failure in a
    row; the checkpoint's position stays as its last page left it."""
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE learned_channels SET state = 'error', error = %s, updated_at = now(), checkpoint = checkpoint ||"
            " jsonb_build_object('failures', coalesce((checkpoint ->> 'failures')::int, 0) + 1, 'retry_at',"
            " to_jsonb(%s::timestamptz + make_interval(secs => least(%s, %s * power(2, coalesce((checkpoint ->>"
            " 'failures')::int, 0)))))) WHERE source_id = %s",
            (sentence, now, max_s, base_s, source_id),
        )
