"""The engine's composition: its model, tools, stores and services built over one database and handed to Engine."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from core.agents import AgentDeps
from core.approvals import ApprovalService
from core.channel_admin import ChannelAdmin
from core.channels import ChannelResolver, channel_policy_layer
from core.config import Settings, SettingsError
from core.engine import Engine, EngineParts, load_system_prompt
from core.history import TurnHistory
from core.llm import LLMClient, resolve_model
from core.person_limits import PersonLimits, person_ledger
from core.quota import TokenQuota
from core.retrieval.retriever import Retriever
from core.runs import RunNeeds, Runs
from core.stops import RunStops
from core.store.api_keys import ApiKeyStore
from core.store.channel_config import ChannelConfigStore
from core.store.continuations import ContinuationStore
from core.store.conversations import ConversationStore
from core.store.db import Database
from core.store.locks import ConversationLocks
from core.store.run_stops import RunStopStore
from core.store.usage import UsageLog
from core.tokens import TokenCounter, get_token_counter
from core.tools import ApprovalPolicy, ToolExecutor, ToolRegistry, ToolServices, builtin_registry
from core.tools.approval_policy import PolicyLayer, ToolApprovals, settings_layers
from core.tools.internal_search import INTERNAL_SEARCH
from core.tools.read_conversation import read_conversation_tool
from core.tools.read_url import ReadUrlConfig, read_url_tool
from core.tools.reminders import CREATE_REMINDER
from core.tools.sql_query import SqlQueryConfig, sql_query_tool

__all__ = ["add_sql_query", "build_engine", "build_llm", "build_registry", "engine_parts"]


def build_llm(settings: Settings) -> LLMClient:
    return LLMClient(
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key,
        request_timeout_s=settings.llm_request_timeout_s,
        idle_timeout_s=settings.llm_idle_timeout_s,
    )


def build_registry(settings: Settings | None = None) -> ToolRegistry:
    # internal_search is the engine's own: it registers it when there is a retriever.
    registry = builtin_registry()
    registry.register(CREATE_REMINDER)
    registry.register(read_conversation_tool() if settings is None else read_conversation_tool(
        max_tokens=settings.read_conversation_max_tokens, counter=get_token_counter(settings.llm_model)
    ))
    registry.register(read_url_tool(ReadUrlConfig() if settings is None else ReadUrlConfig.from_settings(settings)))
    return registry


async def add_sql_query(registry: ToolRegistry, settings: Settings) -> ToolRegistry:
    """sql_query joins the tools only when SQL_QUERY_DSN is set; the database's schema is read now, once."""
    config = SqlQueryConfig.from_settings(settings)
    if config is not None:
        registry.register(await sql_query_tool(config, counter=get_token_counter(settings.llm_model)))
    return registry


def build_engine(
    *,
    settings: Settings,
    db: Database,
    llm: LLMClient,
    registry: ToolRegistry,
    retriever: Retriever | None = None,
    counter: TokenCounter | None = None,
    tool_services: ToolServices | None = None,
    approval_layers: Sequence[PolicyLayer] = (),
) -> Engine:
    """The engine over this database and model client (what `relaybot run`, `chat` and the tests use)."""
    parts = engine_parts(
        settings=settings, db=db, llm=llm, registry=registry, retriever=retriever, counter=counter,
        tool_services=tool_services, approval_layers=approval_layers,
    )
    return Engine(settings=settings, parts=parts)


def engine_parts(
    *,
    settings: Settings,
    db: Database,
    llm: LLMClient,
    registry: ToolRegistry,
    retriever: Retriever | None,
    counter: TokenCounter | None,
    tool_services: ToolServices | None,
    approval_layers: Sequence[PolicyLayer],
) -> EngineParts:
    model = resolve_model(settings.llm_model, upstream_id=settings.llm_upstream_model, overrides=settings.llm_model_overrides)
    counter = counter or get_token_counter(model.upstream_id)
    # A copy: the caller's registry stays as it was. internal_search is the engine's own tool, registered
    # here only, and only when there is something to search.
    registry = registry.copy()
    if retriever is not None:
        registry.register(INTERNAL_SEARCH)
    tool_approvals = checked_approvals(settings, registry, approval_layers)
    conversations = ConversationStore(db)
    # Per-channel settings, read afresh for every question: a change is seen by every process at once.
    channel_store = ChannelConfigStore(db)
    channels = ChannelResolver(settings=settings, source=channel_store)
    continuations = ContinuationStore(db)
    deps = AgentDeps(
        llm=llm,
        model=model,
        planner_model=resolve_model(settings.agent_model) if settings.agent_model else model,
        executor=ToolExecutor(registry, approvals=tool_approvals),
        retriever=retriever,
        counter=counter,
        tool_services=tool_services or ToolServices(),
        # One reservation per model call against the accounts that pay for it (core/quota.py): API keys' days, and
        # a chat asker's own where a per-person limit applies (core/person_limits.py).
        quota=TokenQuota([ApiKeyStore(db)], people=PersonLimits(
            ledger=person_ledger(db), exempt=settings.limits_exempt, exempt_approvers=settings.limits_exempt_approvers,
        )),
    )
    runs = build_runs(settings, db, deps=deps, registry=registry, conversations=conversations,
                      continuations=continuations, channels=channels)
    return EngineParts(
        model=model, counter=counter, registry=registry, tool_approvals=tool_approvals, conversations=conversations,
        channels=channels, runs=runs,
        # What /relaybot (Slack) and /relaybot config (Discord) read and change, audited by the store.
        channel_admin=ChannelAdmin(store=channel_store, resolver=channels, settings=settings),
        approvals=ApprovalService(continuations=continuations, runs=runs, policy=approval_policy(settings), channels=channels),
    )


def checked_approvals(settings: Settings, registry: ToolRegistry, layers: Sequence[PolicyLayer]) -> ToolApprovals:
    """Who must approve what: a channel's own rules (`relaybot channels set`) first, the most specific place;
    then the admin's settings, then the caller's layers (e.g. MCP trust), then each tool's own rule and flag."""
    approvals = ToolApprovals([
        channel_policy_layer(),
        *settings_layers(settings.tool_approval_policy, settings.tool_approval_overrides),
        *layers,
    ])
    # A misspelt tool name must not leave a tool unguarded.
    unknown = approvals.unknown_names(registry.owns)
    if unknown:
        raise SettingsError(
            f"The approval settings name tools that do not exist ({'; '.join(unknown)}); "
            "use the names `relaybot tools` lists (an MCP tool as server__tool)."
        )
    return approvals


def approval_policy(settings: Settings) -> ApprovalPolicy:
    return ApprovalPolicy(approvers=frozenset(settings.approvers), approver_roles=frozenset(settings.approver_roles))


def build_runs(
    settings: Settings, db: Database, *, deps: AgentDeps, registry: ToolRegistry,
    conversations: ConversationStore, continuations: ContinuationStore, channels: ChannelResolver,
) -> Runs:
    return Runs(RunNeeds(
        settings=settings,
        deps=deps,
        system_prompt=load_system_prompt(settings),
        base_tools=registry.names,
        conversations=conversations,
        continuations=continuations,
        history=TurnHistory(conversations, deps.counter),
        locks=ConversationLocks(db),
        usage=UsageLog(db),
        channels=channels,
        # Stop buttons reach a run in any process: a row per run, LISTEN/NOTIFY on a connection of its own, to
        # db.url as it is when the listener connects (the embedded server's is known once it started). A partial,
        # not a lambda: a run calls it, and a run's path stays in core/.
        stops=RunStops(
            store=RunStopStore(db), channels=channels, listen_url=partial(getattr, db, "url"), policy=approval_policy(settings),
        ),
    ))
