"""What an adapter hands the engine: a question, where it was asked, and by whom."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ConversationKey:
    """Where a conversation lives on its platform; thread is '' for a rolling DM conversation."""

    platform: str
    workspace: str
    channel: str
    thread: str = ""


@dataclass(frozen=True, kw_only=True)
class Attachment:
    """A file on the user's message, already downloaded by the adapter."""

    filename: str
    content_type: str
    data: bytes
    skipped: str = ""  # why it was not downloaded (e.g. "too large to read"); the engine then only names it


@dataclass(frozen=True, kw_only=True)
class PriorMessage:
    """A message the platform holds from before the bot joined a thread (e.g. earlier thread replies)."""

    author: str
    text: str
    is_bot: bool = False  # any bot, app or webhook
    is_self: bool = False  # this bot's own message: only these become assistant turns


@dataclass(frozen=True, kw_only=True)
class Actor:
    """Someone acting on the bot: asking, or deciding an approval."""

    id: str
    name: str = ""
    roles: frozenset[str] = frozenset()
    is_admin: bool = False

    @property
    def display(self) -> str:
        return self.name or self.id


@dataclass(frozen=True, kw_only=True)
class Request:
    """One question for the engine."""

    question: str
    conversation: ConversationKey
    user: Actor
    attachments: tuple[Attachment, ...] = ()
    thread_context: tuple[PriorMessage, ...] = ()
    agent_type: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
