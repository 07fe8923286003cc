"""What a tool is told when it runs: who asked, where, and the services the engine lends it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from core.requests import ConversationKey, PriorMessage
from core.retrieval.retriever import Exposure, Retriever, SourceScope
from core.sources import SourceCollector


class ReminderScheduler(Protocol):
    """Schedules a reminder message (core.reminders.ReminderService implements it)."""

    async def create(self, *, conversation: ConversationKey, user_id: str, text: str, due_at: datetime) -> object: ...


# "thread": the conversation's thread (a DM's own messages when it has none); "channel": the recent
# top-level messages of the channel it is in.
ReadScope = Literal["thread", "channel"]
# Why a conversation could not be read: the platform hides others' text from this bot (Discord without
# the message-content intent), no reader serves its platform in this process, or the platform failed.
UnreadableReason = Literal["no_message_content", "not_served", "failed"]


class ConversationUnreadable(Exception):
    """A conversation's messages cannot be read; `reason` picks the sentence the tool answers with."""

    def __init__(self, reason: UnreadableReason) -> None:
        super().__init__(reason)
        self.reason: UnreadableReason = reason


class ConversationReader(Protocol):
    """Reads a conversation's messages from its platform (each adapter's `reader`; core.tools.read_conversation
    dispatches by platform). Only ever the place a ConversationKey names: a tool passes its own ctx.conversation."""

    async def read(self, conversation: ConversationKey, *, scope: ReadScope, limit: int) -> list[PriorMessage]:
        """The newest `limit` messages with text, oldest first; raises ConversationUnreadable."""
        ...


@dataclass(frozen=True, kw_only=True)
class ToolServices:
    """Long-lived services the engine lends its tools; given to the engine at construction."""

    reminders: ReminderScheduler | None = None
    conversations: ConversationReader | None = None


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """Who and where one tool call runs for, and what it may use; every field is typed, none is looked up by name."""

    user: str
    conversation_id: int | None
    conversation: ConversationKey
    user_name: str = ""
    services: ToolServices = ToolServices()
    retriever: Retriever | None = None
    sources: SourceCollector | None = None  # numbers what internal_search finds, for citations
    search_exposure: Exposure | None = None  # which sources internal_search looks in; None: every one not off
    source_scope: SourceScope | None = None  # which sources this conversation may see (None: open ones only)
    # The channel's approval rules, tool → core.tools.approval_policy.PolicyRule (typed loosely: that module imports this one).
    channel_tool_rules: Mapping[str, Any] = field(default_factory=dict)
    retrieval_chunks: int = 6
    # The asker's own words this turn (never the text of files they attached, which anyone may have written),
    # e.g. to tell a URL they named from one a page or a file injected.
    question: str = ""

    @property
    def platform(self) -> str:
        return self.conversation.platform

    @property
    def channel(self) -> str:
        return self.conversation.channel
