"""What an agent run is built from and ends in: its config, its dependencies, who asked, and its ending as data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Union

from core.agents.state import RunState
from core.events import Event, PendingCall, SourceItem, ToolRun, Usage
from core.llm import LLMClient, ModelInfo
from core.quota import TokenQuota
from core.requests import Actor, ClientTool, ConversationKey
from core.retrieval.retriever import Retriever, SourceScope
from core.tokens import TokenCounter
from core.tools import ToolExecutor, ToolServices
from core.tools.approval_policy import PolicyRule


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """How one run behaves; built by the engine from settings and the request."""

    agent_type: str
    system_prompt: str
    loop_limit: int = 8
    retrieval_chunks: int = 6
    retrieval_doc_tokens: int = 2000
    temperature: float | None = None
    max_tokens: int | None = None
    base_tools: tuple[str, ...] = ()
    # From the channel's settings (core/channels.py): the sources its searches may see (None: open ones
    # only), and its approval rules, which the tools' context carries to the channel's policy layer.
    source_scope: SourceScope | None = None
    tool_rules: Mapping[str, PolicyRule] = field(default_factory=dict)
    # Tools the asker's client runs (an API request's): offered with the others; a call to one pauses the run.
    client_tools: tuple[ClientTool, ...] = ()
    response_format: dict[str, Any] | None = None  # the request's structured output, where the model supports it
    # The request's own narrowing of the sources (an API key's), kept with a pause so a resumed run keeps it.
    request_sources: tuple[str, ...] | None = None


@dataclass(kw_only=True)
class AgentDeps:
    """What an agent needs from outside; injected, never looked up."""

    llm: LLMClient
    model: ModelInfo
    planner_model: ModelInfo
    executor: ToolExecutor
    retriever: Retriever | None
    counter: TokenCounter
    tool_services: ToolServices = field(default_factory=ToolServices)
    # Reserves each model call's tokens against the accounts that pay for it (an API key's day), settles after.
    quota: TokenQuota | None = None


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """Who asked, where, and which turn this run writes."""

    conversation_id: int | None
    conversation: ConversationKey
    user: Actor
    turn_id: str
    # The asker's own words this turn, apart from attached files' text (which anyone may have written).
    question: str = ""


@dataclass(frozen=True, kw_only=True)
class Finished:
    """The run ended with an answer; `turn_messages` are this turn's messages to store."""

    answer: str
    turn_messages: list[dict[str, Any]]
    sources: list[SourceItem]
    usage: Usage


@dataclass(frozen=True, kw_only=True)
class Paused:
    """The run stopped on calls that need a person's decision; `state` is everything needed to resume."""

    state: RunState
    calls: tuple[PendingCall, ...]


@dataclass(frozen=True, kw_only=True)
class Progress:
    """What a run that stopped early had done: its turn so far (the question and every tool round,
    each completed with a result per call), its sources, and the approved calls it started."""

    turn_messages: list[dict[str, Any]]
    sources: list[SourceItem]
    ran: tuple[ToolRun, ...]


RunEnd = Union[Finished, Paused]
# What an agent yields: events for the user, then (unless it failed) how the run ended, as data.
AgentOutput = Union[Event, Finished, Paused]
MarkStarted = Callable[[str], Awaitable[bool]]

