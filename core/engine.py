"""The façade adapters call: ask() and answer() for questions, `approvals` for clicks — the seeds' StreamProcessor."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

from core.agents import AgentDeps
from core.approvals import ApprovalService
from core.channel_admin import ChannelAdmin
from core.channels import ChannelConfig, ChannelResolver, channel_policy_layer
from core.citations import Citation, cite
from core.config import Settings, SettingsError
from core.events import Done, Event, Failed, SourceItem, Sources, ToolCallFinished, ToolCallStarted
from core.history import TurnHistory
from core.llm import LLMClient, ModelInfo, resolve_model
from core.quota import TokenQuota
from core.requests import ConversationKey, Request
from core.retrieval.retriever import Retriever
from core.runs import Runs
from core.store.api_keys import ApiKeyStore
from core.store.channel_config import ChannelConfigStore
from core.store.continuations import ContinuationStore
from core.store.conversations import ConversationStore
from core.store.db import Database
from core.store.locks import ConversationLocks
from core.store.usage import UsageLog
from core.store.feedback import FeedbackStore
from core.store.run_stops import RunStopStore
from core.stops import RunStops
from core.tokens import TokenCounter, get_token_counter
from core.tools import ApprovalPolicy, ToolExecutor, ToolRegistry, ToolServices
from core.tools.approval_policy import PolicyLayer, ToolApprovals, settings_layers
from core.tools.internal_search import INTERNAL_SEARCH

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


class Engine:
    """Turns requests into agent runs, and clicks into resumed runs; knows no platform."""

    def __init__(
        self,
        *,
        settings: Settings,
        db: Database,
        llm: LLMClient,
        registry: ToolRegistry,
        retriever: Retriever | None = None,
        counter: TokenCounter | None = None,
        tool_services: ToolServices | None = None,
        approval_layers: Sequence[PolicyLayer] = (),
    ) -> None:
        self.settings = settings
        self.model: ModelInfo = resolve_model(
            settings.llm_model, upstream_id=settings.llm_upstream_model, overrides=settings.llm_model_overrides
        )
        planner_model = resolve_model(settings.agent_model) if settings.agent_model else self.model
        self.counter = counter or get_token_counter(self.model.upstream_id)
        # A copy: the caller's registry stays as it was. internal_search is the engine's own tool, registered
        # here only, and only when there is something to search.
        self.registry = registry.copy()
        if retriever is not None:
            self.registry.register(INTERNAL_SEARCH)
        # Who must approve what: the admin's settings first, then the caller's layers (e.g. MCP trust),
        # then each tool's own rule and flag. A misspelt tool name must not leave a tool unguarded.
        # A channel's own rules (`relaybot channels set`) come first: the most specific place wins.
        self.tool_approvals = ToolApprovals([
            channel_policy_layer(),
            *settings_layers(settings.tool_approval_policy, settings.tool_approval_overrides),
            *approval_layers,
        ])
        unknown = self.tool_approvals.unknown_names(self.registry.owns)
        if unknown:
            raise SettingsError(
                f"The approval settings name tools that do not exist ({'; '.join(unknown)}); "
                "use the names `relaybot tools` lists (an MCP tool as server__tool)."
            )
        self.conversations = ConversationStore(db)
        # Per-channel settings, read afresh for every question: a change is seen by every process at once.
        channel_store = ChannelConfigStore(db)
        self.channels = ChannelResolver(settings=settings, source=channel_store)
        # What /relaybot (Slack) and /relaybot config (Discord) read and change, audited by the store.
        self.channel_admin = ChannelAdmin(store=channel_store, resolver=self.channels, settings=settings)
        continuations = ContinuationStore(db)
        deps = AgentDeps(
            llm=llm,
            model=self.model,
            planner_model=planner_model,
            executor=ToolExecutor(self.registry, approvals=self.tool_approvals),
            retriever=retriever,
            counter=self.counter,
            tool_services=tool_services or ToolServices(),
            # One reservation per model call against the accounts that pay for it (core/quota.py): API keys' days.
            quota=TokenQuota([ApiKeyStore(db)]),
        )
        self.runs = Runs(
            settings=settings,
            deps=deps,
            system_prompt=load_system_prompt(settings),
            base_tools=self.registry.names,
            conversations=self.conversations,
            continuations=continuations,
            history=TurnHistory(self.conversations, self.counter),
            locks=ConversationLocks(db),
            usage=UsageLog(db),
            channels=self.channels,
            # Stop buttons reach a run in any process: a row per run, LISTEN/NOTIFY on a connection of its own.
            stops=RunStops(
                store=RunStopStore(db), channels=self.channels, listen_url=lambda: db.url,
                policy=ApprovalPolicy(approvers=frozenset(settings.approvers), approver_roles=frozenset(settings.approver_roles)),
            ),
        )
        # 👍/👎 on final answers, one vote per person per turn (core/store/feedback.py).
        self.feedback = FeedbackStore(db)
        self.approvals = ApprovalService(
            continuations=continuations,
            runs=self.runs,
            policy=ApprovalPolicy(approvers=frozenset(settings.approvers), approver_roles=frozenset(settings.approver_roles)),
            channels=self.channels,
        )

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
