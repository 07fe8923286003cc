"""What the HTTP API asks of storage: keys, quotas, its conversations and its event journal, as data and interfaces."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from core.quota import QuotaLimit, QuotaRefusal
from core.requests import ConversationKey

API_PLATFORM = "api"
API_CHANNEL = "api"


@dataclass(frozen=True, kw_only=True)
class ApiKey:
    """One key as stored; the secret itself is never kept."""

    id: int
    name: str
    prefix: str
    sources: tuple[str, ...] | None  # None: every source
    requests_per_day: int | None
    tokens_per_day: int | None
    created_at: datetime
    revoked_at: datetime | None = None


def quota_refusal(limit: QuotaLimit, allowed: int, resets_at: datetime) -> QuotaRefusal:
    """A key's refusal, with the sentence every surface shows for it (a 429's message, a stream's error)."""
    what = "requests" if limit == "requests_per_day" else "tokens"
    resets = resets_at.astimezone(timezone.utc)
    return QuotaRefusal(limit=limit, allowed=allowed, resets_at=resets, sentence=(
        f"This key has used its {allowed} {what} for today; the count starts again at "
        f"{resets.strftime('%Y-%m-%d %H:%M')} UTC."))


@dataclass(frozen=True, kw_only=True)
class JournalEvent:
    """One SSE event of a stream: its number in the stream, its name and its JSON data."""

    seq: int
    event: str
    data: dict[str, Any]


def api_key_workspace(key_id: int) -> str:
    return f"key:{key_id}"


def api_conversation_key(key_id: int, conversation: str) -> ConversationKey:
    """An API conversation lives under its key: another key (or a chat platform) cannot name it."""
    return ConversationKey(platform=API_PLATFORM, workspace=api_key_workspace(key_id), channel=API_CHANNEL,
                           thread=conversation)


def api_key_of(conversation: ConversationKey) -> int | None:
    """The key an API conversation lives under (api_conversation_key's inverse); None for any other conversation."""
    if conversation.platform != API_PLATFORM or not conversation.workspace.startswith("key:"):
        return None
    digits = conversation.workspace[4:]
    return int(digits) if digits.isdigit() else None


def is_api_key_audience(audience: str) -> bool:
    """Whether a grant's audience is one key's (api_key_audience)."""
    return audience.startswith(f"{API_PLATFORM}:key:")


def api_key_audience(key_id: int) -> str:
    """Whom a source is granted to for one key (core/channels.py's channel scope of every conversation of the key):
    a restricted source granted here is seen by that key's answers only."""
    return f"{API_PLATFORM}:{api_key_workspace(key_id)}:{API_CHANNEL}"


class ApiKeys(Protocol):
    """core.store.api_keys.ApiKeyStore."""

    async def authenticate(self, secret: str) -> ApiKey | None: ...

    async def take_request(self, key: ApiKey) -> QuotaRefusal | None: ...

    async def give_back(self, key: ApiKey) -> None: ...


class ApiConversationLog(Protocol):
    """core.store.api_conversations.ApiConversations."""

    async def exists(self, key_id: int, conversation: str) -> bool: ...

    async def latest_continuation(self, key_id: int, conversation: str) -> uuid.UUID | None: ...

    async def conversation_of(self, key_id: int, continuation: uuid.UUID) -> str | None: ...


class EventLog(Protocol):
    """core.store.event_journal.EventJournal."""

    async def append(self, stream_id: uuid.UUID, key_id: int, events: Sequence[JournalEvent]) -> None: ...

    async def after(self, stream_id: uuid.UUID, key_id: int, seq: int) -> list[JournalEvent]: ...
