"""What a tool is told when it runs: who asked, where, and the services the engine lends it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from core.requests import ConversationKey
from core.retrieval.retriever import Exposure, Retriever
from core.sources import SourceCollector


class ReminderScheduler(Protocol):
    """Schedules a reminder message (core.reminders.ReminderService implements it)."""

    async def create(self, *, conversation: ConversationKey, user_id: str, text: str, due_at: datetime) -> object: ...


@dataclass(frozen=True, kw_only=True)
class ToolServices:
    """Long-lived services the engine lends its tools; given to the engine at construction."""

    reminders: ReminderScheduler | None = None


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
    retrieval_chunks: int = 6
    question: str = ""  # the asker's message this turn, e.g. to tell a URL they named from one a page injected

    @property
    def platform(self) -> str:
        return self.conversation.platform

    @property
    def channel(self) -> str:
        return self.conversation.channel
