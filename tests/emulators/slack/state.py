"""Records the Slack emulator keeps: workspaces, users, channels, messages, files and calls."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Literal

JsonDict = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Team:
    """One workspace with the app installed: its bot token and bot identity."""

    team_id: str
    name: str
    domain: str
    bot_token: str
    bot_user_id: str
    bot_id: str
    app_id: str
    enterprise_id: str | None = None  # the Enterprise Grid org the workspace belongs to


@dataclass(frozen=True, kw_only=True)
class Grant:
    """Whom a bot token speaks for: one workspace, or (team_id None) every workspace of an org-wide install."""

    team_id: str | None
    enterprise_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class User:
    user_id: str
    team_id: str
    name: str
    real_name: str
    is_bot: bool = False
    is_admin: bool = False  # a workspace admin (users.info `is_admin`)
    is_owner: bool = False  # a workspace owner (users.info `is_owner`)
    is_restricted: bool = False  # a guest: a multi-channel guest (users.info `is_restricted`)
    is_ultra_restricted: bool = False  # a single-channel guest (`is_ultra_restricted` too)
    display_name: str | None = None  # the profile's display name (users.info `profile.display_name`); `name` without


@dataclass(frozen=True, kw_only=True)
class Edit:
    """One accepted chat.update: the text and blocks it set (`markdown`: the text came as `markdown_text`)."""

    text: str
    blocks: list[JsonDict] | None
    edited_ts: str
    at_s: float
    markdown: bool = False


@dataclass(kw_only=True)
class MessageRecord:
    """A message as the emulator holds it; `text`/`blocks` are the current (final) content.

    `markdown`: the current text came as `markdown_text` (Markdown Slack renders itself), held as sent.
    `posted_text`: the text the message was posted with, before any edit."""

    channel: str
    team_id: str
    ts: str
    text: str
    blocks: list[JsonDict] | None = None
    thread_ts: str | None = None
    user: str | None = None
    bot_id: str | None = None
    files: list[JsonDict] = field(default_factory=list)
    subtype: str | None = None  # e.g. "bot_message" for another app's or a webhook's message
    username: str | None = None  # the name a bot_message is shown under
    metadata: JsonDict | None = None  # message metadata ({"event_type", "event_payload"}) set when posting
    edits: list[Edit] = field(default_factory=list)
    deleted: bool = False
    posted_at_s: float = field(default_factory=time.monotonic)
    markdown: bool = False
    posted_text: str | None = None
    # A message made by chat.startStream: streaming until chat.stopStream (or an update) ends it.
    stream: StreamRecord | None = None
    reactions: dict[str, list[str]] = field(default_factory=dict)  # emoji name → the users who reacted, in order

    def __post_init__(self) -> None:
        if self.posted_text is None:
            self.posted_text = self.text

    @property
    def is_bot(self) -> bool:
        return self.bot_id is not None

    def to_api(self, *, reply_count: int = 0, include_metadata: bool = True, latest_reply: str | None = None) -> JsonDict:
        """The message as Slack's Web API returns it (history and replies add metadata only when asked)."""
        out: JsonDict = {"type": "message", "ts": self.ts, "text": self.text, "team": self.team_id}
        if self.subtype is not None:
            out["subtype"] = self.subtype
        if self.user is not None:
            out["user"] = self.user
        if self.bot_id is not None:
            out["bot_id"] = self.bot_id
        if self.username is not None:
            out["username"] = self.username
        if self.metadata is not None and include_metadata:
            out["metadata"] = self.metadata
        if self.blocks is not None:
            out["blocks"] = self.blocks
        if self.thread_ts is not None:
            out["thread_ts"] = self.thread_ts
        if reply_count:
            out["reply_count"] = reply_count
        if latest_reply is not None:
            out["latest_reply"] = latest_reply
        if self.files:
            out["files"] = self.files
        if self.edits:
            out["edited"] = {"user": self.user, "ts": self.edits[-1].edited_ts}
        if self.reactions:
            out["reactions"] = [{"name": name, "users": list(users), "count": len(users)}
                                for name, users in self.reactions.items()]
        return out


@dataclass(kw_only=True)
class StreamRecord:
    """A native stream (chat.startStream → appendStream… → stopStream) and what each call added."""

    recipient_user_id: str | None
    recipient_team_id: str | None
    started_at_s: float
    appends: list[str] = field(default_factory=list)  # markdown text per call, start and stop included
    append_at_s: list[float] = field(default_factory=list)  # when each of `appends` arrived
    stopped_at_s: float | None = None
    chunks: list[JsonDict] = field(default_factory=list)  # task_update / plan_update chunks, in order
    stopped: bool = False
    stopped_by: Literal["stop", "timeout", "update", ""] = ""


@dataclass(frozen=True, kw_only=True)
class ViewRecord:
    """One views.publish: the Home tab a user sees."""

    user_id: str
    team_id: str
    view: JsonDict
    at_s: float


@dataclass(frozen=True, kw_only=True)
class AssistantRecord:
    """One assistant.threads.setTitle or setSuggestedPrompts call."""

    method: str
    channel: str
    thread_ts: str | None
    team_id: str
    params: JsonDict


@dataclass(frozen=True, kw_only=True)
class EphemeralRecord:
    channel: str
    team_id: str
    user: str
    text: str
    blocks: list[JsonDict] | None
    thread_ts: str | None
    message_ts: str
    # The response_url nonce it was posted through ("" for chat.postEphemeral); how often replace_original
    # rewrote it since, and whether delete_original took it away.
    via: str = ""
    replaced: int = 0
    deleted: bool = False


@dataclass(frozen=True, kw_only=True)
class StatusRecord:
    """One assistant.threads.setStatus call."""

    channel: str
    thread_ts: str
    status: str
    team_id: str
    at_s: float
    loading_messages: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CallRecord:
    """One Web API request as the emulator answered it."""

    method: str
    at_s: float
    team_id: str | None
    params: JsonDict
    status: int
    error: str | None
    connection: str = ""  # the client's end of the TCP connection ("127.0.0.1:53124"): a new one per call, or reused
    token: str = ""  # the token the call came with (Bearer or `token` param)


@dataclass(frozen=True, kw_only=True)
class FileRecord:
    file_id: str
    team_id: str
    name: str
    content: bytes
    mimetype: str
    info: JsonDict


@dataclass(frozen=True, kw_only=True)
class SocketAck:
    """The client's acknowledgement of one Socket Mode envelope."""

    envelope_id: str
    envelope_type: Literal["events_api", "interactive", "slash_commands"]
    payload: JsonDict | None
    latency_s: float


class TsClock:
    """Issues message timestamps the Slack way ("seconds.micros"), strictly increasing."""

    def __init__(self) -> None:
        self._last_us = 0

    def next(self) -> str:
        now_us = max(int(time.time() * 1_000_000), self._last_us + 1)
        self._last_us = now_us
        return f"{now_us // 1_000_000}.{now_us % 1_000_000:06d}"


_ids = itertools.count(1)


def new_id(prefix: str) -> str:
    """A Slack-looking id (e.g. F0000012A) unique within this process."""
    return f"{prefix}{next(_ids):08d}A"
