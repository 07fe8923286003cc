"""Discord messages as learning reads them: a REST message's JSON or a gateway discord.Message made a ChannelMessage, with its jump URL."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import discord

from core.learning.model import ChannelMessage

JSON = dict[str, Any]
# A person writing, and a reply: joins, pins, boosts, "started a thread" and a thread's starter line are not.
PERSON_TYPES = frozenset({0, 19})
HAS_THREAD_FLAG = 1 << 5
DISCORD_EPOCH_MS = 1_420_070_400_000
THREAD_TYPES = frozenset({10, 11, 12})
PRIVATE_THREAD_TYPE = 12


def jump_url(guild: str, channel: str, message: str = "") -> str:
    """Discord's link to a message (or, without one, to a channel or thread): no call needed."""
    return f"https://discord.com/channels/{guild}/{channel}" + (f"/{message}" if message else "")


def snowflake_time(snowflake: str | int) -> datetime:
    return datetime.fromtimestamp(((int(snowflake) >> 22) + DISCORD_EPOCH_MS) / 1000, timezone.utc)


def snowflake_at(moment: datetime) -> int:
    """The smallest snowflake of `moment`: every message at or after it has an id at least this."""
    return max(0, int(moment.timestamp() * 1000) - DISCORD_EPOCH_MS) << 22


def _at(raw: object, fallback: str) -> datetime:
    if isinstance(raw, str) and raw:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return snowflake_time(fallback)


def is_person(data: JSON) -> bool:
    return int(data.get("type") or 0) in PERSON_TYPES


def from_json(data: JSON, *, guild: str, channel: str, thread: str = "", me: str = "") -> ChannelMessage:
    """A REST message: `channel` is where it is (a thread's id for a reply), `thread` the thread it is in ('' for
    the channel's own); a message that started a thread is that thread's root (the thread has its id)."""
    author = data.get("author") or {}
    member = data.get("member") or {}
    started = data.get("thread") if isinstance(data.get("thread"), dict) else None
    message_id = str(data["id"])
    root = started is not None or bool(int(data.get("flags") or 0) & HAS_THREAD_FLAG)
    names = [member.get("nick"), author.get("global_name"), author.get("username")]
    return ChannelMessage(
        id=message_id,
        thread=thread or (message_id if root else ""),
        author_id=str(author.get("id") or ""),
        author_name=next((str(name) for name in names if name), str(author.get("id") or "")),
        text=str(data.get("content") or ""),
        at=_at(data.get("timestamp"), message_id),
        by_bot=bool(author.get("bot")) or data.get("webhook_id") is not None or str(author.get("id")) == me,
        to_bot=bool(me) and any(str(u.get("id")) == me for u in data.get("mentions") or () if isinstance(u, dict)),
        # message_count leaves the starter out; a root whose thread Discord did not describe still gets read.
        reply_count=int(started.get("message_count") or 0) if started is not None else (1 if root else 0),
        latest_reply=str(started.get("last_message_id") or "") if started is not None else "",
        files=tuple(str(a.get("filename") or "") for a in data.get("attachments") or () if a.get("filename")),
        permalink=jump_url(guild, channel, message_id),
    )


def display_name(member: JSON) -> str:
    """A member as shown beside their messages: server nickname, else display name, else username."""
    user = member.get("user") or {}
    return next((str(n) for n in (member.get("nick"), user.get("global_name"), user.get("username")) if n), "")


def thread_root(data: JSON, *, guild: str, owner_name: str = "") -> ChannelMessage:
    """A thread as the root of its replies (id = the thread's), by its creator: its name is what it shows at its top.
    The thread's own first message, read by `replies`, replaces it where the thread was started on one (same id)."""
    thread_id = str(data["id"])
    meta = data.get("thread_metadata") or {}
    return ChannelMessage(
        id=thread_id, thread=thread_id, author_id=str(data.get("owner_id") or ""), author_name=owner_name,
        text=str(data.get("name") or ""), at=_at(meta.get("create_timestamp"), thread_id),
        reply_count=int(data.get("message_count") or 0), latest_reply=str(data.get("last_message_id") or ""),
        permalink=jump_url(guild, thread_id),
    )


def from_message(message: discord.Message, *, me: int) -> ChannelMessage:
    """A gateway message (new or edited): in a thread, its `thread` is the thread's id."""
    channel = message.channel
    in_thread = isinstance(channel, discord.Thread) or getattr(channel, "type", None) in (
        discord.ChannelType.public_thread, discord.ChannelType.private_thread, discord.ChannelType.news_thread)
    author = message.author
    guild = str(message.guild.id) if message.guild is not None else str(getattr(channel, "guild_id", "") or "")
    return ChannelMessage(
        id=str(message.id),
        thread=str(channel.id) if in_thread else (str(message.id) if message.flags.has_thread else ""),
        author_id=str(author.id), author_name=author.display_name, text=message.content,
        at=message.created_at.astimezone(timezone.utc),
        by_bot=author.bot or message.webhook_id is not None or author.id == me,
        to_bot=any(user.id == me for user in message.mentions),
        files=tuple(a.filename for a in message.attachments),
        permalink=jump_url(guild, str(channel.id), str(message.id)),
    )
