"""State records of the Discord emulator: ids, guilds, channels, users, messages, interactions."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Literal

DISCORD_EPOCH_MS = 1_420_070_400_000
TEXT_CHANNEL_TYPE = 0
DM_CHANNEL_TYPE = 1
PUBLIC_THREAD_TYPE = 11
PRIVATE_THREAD_TYPE = 12
THREAD_TYPES = frozenset({PUBLIC_THREAD_TYPE, PRIVATE_THREAD_TYPE})
EPHEMERAL_FLAG = 64
LOADING_FLAG = 128

JSONDict = dict[str, Any]


class SnowflakeFactory:
    """Makes Discord-shaped, increasing snowflakes (timestamp in the high bits)."""

    def __init__(self) -> None:
        self._counter = itertools.count()
        self._last = 0

    def at(self, timestamp: float) -> int:
        """A snowflake of a past moment (a message back-dated by a test): its time bits say when."""
        return ((int(timestamp * 1000) - DISCORD_EPOCH_MS) << 22) | (next(self._counter) & 0xFFF)

    def next(self) -> int:
        now_ms = int(time.time() * 1000) - DISCORD_EPOCH_MS
        value = (now_ms << 22) | (next(self._counter) & 0xFFF)
        # Two ids in the same millisecond with a wrapped counter must still increase.
        self._last = max(value, self._last + 1)
        return self._last


@dataclass(frozen=True, kw_only=True)
class RateLimitConfig:
    """Per-channel budget shared by message creates and edits (window before time_scale)."""

    limit: int = 5
    window_s: float = 5.0
    webhooks_share_bucket: bool = True


# Discord's documented global limit: 50 requests a second per bot, interactions excluded.
GLOBAL_LIMIT_PER_S = 50


@dataclass(frozen=True, kw_only=True)
class GlobalLimitConfig:
    """The per-bot limit across every route (window before time_scale); a 429 here says `global`."""

    limit: int = GLOBAL_LIMIT_PER_S
    window_s: float = 1.0


@dataclass(frozen=True, kw_only=True)
class UploadedFile:
    """A file attached to a user's message; served back by the emulator over HTTP."""

    filename: str
    data: bytes
    content_type: str = "text/plain"


@dataclass(kw_only=True)
class User:
    id: int
    name: str
    bot: bool = False
    role_ids: list[int] = field(default_factory=list)
    webhook: bool = False  # the author of an incoming webhook's messages: a member of no guild


@dataclass(kw_only=True)
class Role:
    id: int
    guild_id: int
    name: str
    permissions: int
    position: int


@dataclass(kw_only=True)
class Guild:
    id: int
    name: str
    owner_id: int
    role_ids: list[int] = field(default_factory=list)
    channel_ids: list[int] = field(default_factory=list)
    # None: every user is a member (keeps tests short); otherwise only these users (and the bot).
    member_ids: set[int] | None = None


@dataclass(kw_only=True)
class Channel:
    id: int
    type: int
    name: str
    guild_id: int | None = None
    parent_id: int | None = None
    owner_id: int | None = None
    recipient_id: int | None = None
    last_message_id: int | None = None
    threads_allowed: bool = True  # False: the bot lacks Create Public Threads here (403)
    # Permission overwrites as Discord sends them: {"id", "type" (0 role, 1 member), "allow", "deny"} (strings).
    overwrites: list[JSONDict] = field(default_factory=list)
    archived: bool = False  # a thread's thread_metadata.archived
    archive_timestamp: float = 0.0  # when a thread was archived (or last changed its archived state), epoch seconds
    created_at: float = 0.0  # a thread's thread_metadata.create_timestamp, epoch seconds


@dataclass(frozen=True, kw_only=True)
class MessageVersion:
    """One state of a message: as created, then one per edit."""

    content: str
    embeds: tuple[JSONDict, ...]
    components: tuple[JSONDict, ...]
    flags: int
    at: float


@dataclass(kw_only=True)
class StoredMessage:
    """A message as the emulator keeps it; `versions[0]` is the original, the last is current."""

    id: int
    channel_id: int
    guild_id: int | None
    author_id: int
    versions: list[MessageVersion]
    attachments: list[JSONDict] = field(default_factory=list)
    allowed_mentions: JSONDict | None = None
    message_reference: JSONDict | None = None
    mention_user_ids: list[int] = field(default_factory=list)
    mention_everyone: bool = False
    webhook_id: int | None = None
    interaction_id: int | None = None
    deleted: bool = False
    reactions: dict[str, list[int]] = field(default_factory=dict)  # emoji → the users who reacted, in order

    @property
    def content(self) -> str:
        return self.versions[-1].content

    @property
    def embeds(self) -> tuple[JSONDict, ...]:
        return self.versions[-1].embeds

    @property
    def components(self) -> tuple[JSONDict, ...]:
        return self.versions[-1].components

    @property
    def flags(self) -> int:
        return self.versions[-1].flags

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & EPHEMERAL_FLAG)

    @property
    def edit_count(self) -> int:
        return len(self.versions) - 1

    @property
    def history(self) -> list[str]:
        return [version.content for version in self.versions]


InteractionResponseKind = Literal[
    "callback", "followup", "edit_original", "delete_original", "edit_followup", "delete_followup"
]


@dataclass(frozen=True, kw_only=True)
class InteractionResponseRecord:
    """One thing the bot did to answer an interaction, in the order it happened."""

    kind: InteractionResponseKind
    callback_type: int | None
    payload: JSONDict
    message_id: int | None
    ephemeral: bool
    at: float

    @property
    def content(self) -> str | None:
        data = self.payload.get("data", self.payload) if self.kind == "callback" else self.payload
        value = data.get("content") if isinstance(data, dict) else None
        return value if isinstance(value, str) else None


@dataclass(kw_only=True)
class Interaction:
    id: int
    token: str
    type: int
    user_id: int
    channel_id: int
    guild_id: int | None
    created_at: float
    source_message_id: int | None = None
    original_message_id: int | None = None
    callback_type: int | None = None
    original_loading: bool = False
    responses: list[InteractionResponseRecord] = field(default_factory=list)
    data: JSONDict | None = None  # the `data` it was dispatched with (kept to replay it)
    modal: JSONDict | None = None  # the modal a MODAL (9) response opened, until the user submits it


@dataclass(frozen=True, kw_only=True)
class RequestRecord:
    """One REST request the emulator answered."""

    method: str
    path: str
    status: int
    at: float
    route: str = ""  # the emulator's route name, e.g. "member_get"
    query: str = ""  # the query string as sent, e.g. "limit=100&before=123"
