"""The façade adapters call: ask() and answer() for questions, `approvals` for clicks — the seeds' StreamProcessor."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

from core.approvals import ApprovalService
from core.channel_admin import ChannelAdmin
from core.channels import ChannelConfig, ChannelResolver
from core.citations import Citation, cite
from core.config import Settings
from core.events import Done, Event, Failed, SourceItem, Sources, ToolCallFinished, ToolCallStarted
from core.llm import ModelInfo
from core.requests import ConversationKey, Request
from core.runs import Runs
from core.store.conversations import ConversationStore
from core.tokens import TokenCounter
from core.tools import ToolRegistry
from core.tools.approval_policy import ToolApprovals

log = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are relaybot, a helpful assistant for a team, answering in a chat thread. Answer from the team's "
    "documents when they are relevant and cite them as [n]; say so when you do not know. Be concise and use "
    "Markdown sparingly. Use tools when they help."
)


@dataclass(kw_only=True)
class ChatResult:
    """The agent_chat contract for non-streaming callers."""

    answer: str = ""
    final_answer: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    sources: list[SourceItem] = field(default_factory=list)
    # The sources the final answer cites, under its numbers (core.citations): what a reply lists.
    citations: list[Citation] = field(default_factory=list)
    error: str | None = None
    continuation_id: str | None = None


def load_system_prompt(settings: Settings) -> str:
    if settings.system_prompt_file is not None:
        return Path(settings.system_prompt_file).read_text(encoding="utf-8").strip()
    return DEFAULT_SYSTEM_PROMPT


@dataclass(frozen=True, kw_only=True)
class EngineParts:
    """What the composition root (bot/engine_parts.py) hands the engine: its model, tools, stores and services."""

    model: ModelInfo
    counter: TokenCounter
    registry: ToolRegistry  # the engine's own copy, internal_search in it when there is a retriever
    tool_approvals: ToolApprovals
    conversations: ConversationStore
    channels: ChannelResolver
    channel_admin: ChannelAdmin
    runs: Runs
    approvals: ApprovalService


class Engine:
    """Turns requests into agent runs, and clicks into resumed runs; knows no platform, builds none of its parts."""

    def __init__(self, *, settings: Settings, parts: EngineParts) -> None:
        self.settings = settings
        self.model = parts.model
        self.counter = parts.counter
        self.registry = parts.registry
        self.tool_approvals = parts.tool_approvals
        self.conversations = parts.conversations
        self.channels = parts.channels
        self.channel_admin = parts.channel_admin
        self.runs = parts.runs
        self.approvals = parts.approvals

    async def ask(self, request: Request) -> AsyncIterator[Event]:
        """Answer a question as a stream of events."""
        async for event in self.runs.ask(request):
            yield event

    async def channel(self, key: ConversationKey) -> ChannelConfig:
        """The settings a conversation runs with now (e.g. whether a follow-up needs a mention there)."""
        return await self.channels.resolve(key)

    async def answer(self, request: Request) -> ChatResult:
        """Drain ask() into {answer, final_answer, tools, sources} for callers that do not stream."""
        return await collect(self.ask(request))

    async def drain(self, timeout_s: float) -> bool:
        """Wait up to timeout_s for running answers to end; True when none is left."""
        return await self.runs.drain(timeout_s)

    @property
    def active_runs(self) -> int:
        return self.runs.active


async def collect(events: AsyncIterator[Event]) -> ChatResult:
    result = ChatResult()
    async for event in events:
        match event:
            case ToolCallStarted():
                result.tools.append({"call_id": event.call_id, "tool": event.tool, "arguments": event.arguments})
            case ToolCallFinished():
                result.tools.append(
                    {"call_id": event.call_id, "tool": event.tool, "status": event.status, "output": event.output_preview}
                )
            case Sources():
                result.sources = list(event.items)
            case Done():
                result.answer = result.final_answer = event.answer
                result.citations = list(cite(event.answer, result.sources).citations)
            case Failed():
                result.error = event.message
            case _ if event.kind == "answer_delta":
                result.answer += event.text  # type: ignore[union-attr]
            case _ if event.kind == "approval_required":
                result.continuation_id = event.continuation_id  # type: ignore[union-attr]
    return result
