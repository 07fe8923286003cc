"""Small interfaces the composition root hands to platform adapters; core.store implements them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from core.requests import ConversationKey


@dataclass(frozen=True, kw_only=True)
class LiveMessage:
    """An answer message still being streamed: if its process dies, the next start repairs it."""

    platform: str
    workspace: str
    channel: str
    message_id: str
    thread: str = ""


class LiveAnswerLog(Protocol):
    """Records answer messages while they stream (core.store.live_messages.LiveMessages)."""

    async def add(self, message: LiveMessage) -> None: ...

    async def remove(self, *, platform: str, channel: str, message_id: str) -> None: ...

    async def take_all(self, platform: str) -> list[LiveMessage]:
        """Remove and return the platform's records left by processes that died (each record to one caller)."""
        ...


class EventDedup(Protocol):
    """One atomic "first time?" per platform event, across processes (core.store.processed_events)."""

    async def first_time(self, platform: str, event_id: str) -> bool: ...


class KnownConversations(Protocol):
    """Whether the bot has a conversation in a thread, i.e. answers follow-ups there (core.store.conversations)."""

    async def exists(self, key: ConversationKey) -> bool: ...
