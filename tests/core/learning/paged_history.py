"""A ChannelHistory over in-memory channels, paged newest first as Slack's conversations.history (a port the platforms
implement; the e2e tests run the real adapters against the emulators)."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from core.learning.model import ChannelInfo, ChannelMessage, HistoryPage, LearningRefused

T0 = datetime(2026, 11, 3, 9, 0, tzinfo=timezone.utc)


def ts(minutes: float) -> str:
    """A Slack-like message id for a time `minutes` after T0."""
    return f"{(T0 + timedelta(minutes=minutes)).timestamp():.6f}"


def at_of(message_id: str) -> datetime:
    return datetime.fromtimestamp(float(message_id), tz=timezone.utc)


def msg(minutes: float, text: str, *, author: str = "Ana", thread: str = "", by_bot: bool = False,
        files: tuple[str, ...] = ()) -> ChannelMessage:
    message_id = ts(minutes)
    return ChannelMessage(
        id=message_id, thread=thread, author_id=f"U{author}", author_name=author, text=text, at=at_of(message_id),
        by_bot=by_bot, files=files, permalink=f"https://example.slack.com/archives/C1/p{message_id.replace('.', '')}",
    )


@dataclass
class Channel:
    name: str = "incidents"
    private: bool = False
    direct: bool = False
    messages: dict[str, ChannelMessage] = field(default_factory=dict)  # every message, replies included

    def put(self, message: ChannelMessage) -> ChannelMessage:
        self.messages[message.id] = message
        return message

    def top_level(self) -> list[ChannelMessage]:
        """As history lists them: outside threads and roots, a root with its reply count and latest reply."""
        listed = []
        for m in self.messages.values():
            if m.thread and m.thread != m.id:
                continue
            replies = self.replies_of(m.id)[1:]
            if replies:
                m = dataclasses.replace(m, thread=m.id, reply_count=len(replies), latest_reply=replies[-1].id)
            listed.append(m)
        return sorted(listed, key=lambda m: (m.at, m.id), reverse=True)

    def replies_of(self, root: str) -> list[ChannelMessage]:
        thread = [m for m in self.messages.values() if m.id == root or m.thread == root]
        return sorted(thread, key=lambda m: (m.at, m.id))


class PagedHistory:
    """Channels by id in workspace T1; `page_size` messages a page; `hold_after` pages served, then every read waits
    for `release` (a process stopped mid-backfill); `fail` makes every read raise."""

    def __init__(self, channels: dict[str, Channel], *, page_size: int = 5, reply_page_size: int = 3) -> None:
        self.channels = channels
        self.page_size = page_size
        self.reply_page_size = reply_page_size
        self.calls: list[tuple[str, str, str]] = []  # (method, channel or thread, cursor)
        self.hold_after: int | None = None
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self.fail: Exception | None = None

    async def _gate(self, call: tuple[str, str, str]) -> None:
        if self.fail is not None:
            raise self.fail
        if self.hold_after is not None and len(self.calls) >= self.hold_after:
            self.held.set()
            await self.release.wait()
        self.calls.append(call)

    def _channel(self, workspace: str, channel: str) -> Channel:
        if workspace != "T1" or channel not in self.channels:
            raise LearningRefused("The bot is not in that channel; invite it with /invite @relaybot, then try again.")
        return self.channels[channel]

    async def info(self, workspace: str, channel: str) -> ChannelInfo:
        found = self._channel(workspace, channel)
        return ChannelInfo(name=found.name, private=found.private, direct=found.direct)

    async def history(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        await self._gate(("history", channel, cursor))
        listed = [m for m in self._channel(workspace, channel).top_level() if m.at > oldest]
        return self._page(listed, cursor, self.page_size)

    async def threads(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        await self._gate(("threads", channel, cursor))
        return HistoryPage(messages=())

    async def replies(self, workspace: str, channel: str, thread: str, *, cursor: str) -> HistoryPage:
        await self._gate(("replies", thread, cursor))
        return self._page(self._channel(workspace, channel).replies_of(thread), cursor, self.reply_page_size)

    async def permalink(self, workspace: str, channel: str, message: ChannelMessage) -> str:
        return f"https://example.slack.com/archives/{channel}/p{message.id.replace('.', '')}"

    @staticmethod
    def _page(messages: list[ChannelMessage], cursor: str, size: int) -> HistoryPage:
        """A cursor names the last message served (as Slack's encodes a ts): stable while messages come and go."""
        start = 0
        if cursor:
            start = next((i + 1 for i, m in enumerate(messages) if m.id == cursor), len(messages))
            if start == len(messages) and all(m.id != cursor for m in messages):
                # The named message went meanwhile: go on from where it stood.
                newest_first = len(messages) > 1 and messages[0].at > messages[-1].at
                start = sum(1 for m in messages if (m.id > cursor if newest_first else m.id < cursor))
        page = messages[start:start + size]
        more = start + size < len(messages)
        return HistoryPage(messages=tuple(page), next_cursor=page[-1].id if more and page else "")
