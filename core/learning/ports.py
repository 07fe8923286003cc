"""What each platform lends the engine to learn from its channels, and what the engine lends each platform."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from core.learning.model import ChannelChange, ChannelInfo, ChannelMessage, ChannelPlace, HistoryPage, LearnedChannel, Place


class ChannelHistory(Protocol):
    """Reads a channel's past through the platform's paced door (its read budget; 429s waited out)."""

    async def info(self, workspace: str, channel: str) -> ChannelInfo:
        """The channel's name and privacy; raises LearningRefused with the sentence when it cannot be learned from:
        the bot not a member (Slack `not_in_channel`), no Message Content intent (Discord), a DM, unknown."""
        ...

    async def history(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        """Top-level messages newer than `oldest`, newest first, one page from `cursor` ('' for the first)."""
        ...

    async def threads(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        """Thread roots that `history` does not list (Discord threads with no starter message, archived threads
        included), active after `oldest`; Slack's roots are all in `history`, so it returns an empty page."""
        ...

    async def replies(self, workspace: str, channel: str, thread: str, *, cursor: str) -> HistoryPage:
        """One thread's messages (its root included, oldest first), one page from `cursor`."""
        ...

    async def permalink(self, workspace: str, channel: str, message: ChannelMessage) -> str:
        """A link that opens the message (Slack chat.getPermalink or its documented form; Discord's jump URL)."""
        ...


class ChannelFacts(Protocol):
    """Who can read what on a platform, read from it and cached for minutes (forgotten on member events)."""

    async def place(self, workspace: str, channel: str) -> Place: ...

    async def readable_by(self, workspace: str, user: str, channels: Sequence[str]) -> frozenset[str]:
        """Of `channels`, those `user` can read now (Slack users.conversations; Discord the member's permissions)."""
        ...

    def forget(self, workspace: str, *, user: str = "", channel: str = "") -> None:
        """Drop what is cached of that person (or that channel): a member joined or left."""
        ...


@runtime_checkable
class LearnsChannels(Protocol):
    """A platform adapter that can be learned from: its history door and its facts (adapters/base.py)."""

    channel_history: ChannelHistory
    channel_facts: ChannelFacts


class ChannelLearning(Protocol):
    """The engine's side, lent to adapters (AdapterPorts.learning): every live change about a channel goes here.
    A change about a channel nobody chose is dropped in memory, with no database read."""

    async def take(self, change: ChannelChange) -> None: ...

    def chosen(self, place: ChannelPlace) -> bool:
        """Whether anyone chose the channel, from memory (no database read): an adapter asks before it spends a
        platform call on a change (a message's author's name)."""
        ...

    async def add(
        self, place: ChannelPlace, *, since_days: int | None, keep_days: int | None, by: str = ""
    ) -> LearnedChannel:
        """Start learning from a channel (or change how far back and how long): raises LearningRefused with the
        sentence when it cannot be (a DM, the bot not in it, no Message Content intent). `by` (`slack:T1:U1`,
        `cli:ana`) records the change in the channel's settings history."""
        ...

    async def remove(self, place: ChannelPlace, *, by: str = "") -> bool:
        """Stop learning from it and delete everything learnt from it; False when it was not chosen."""
        ...

    async def get(self, place: ChannelPlace) -> LearnedChannel | None: ...
