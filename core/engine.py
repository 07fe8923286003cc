"""The façade adapters call: ask(), decide(), resume() and answer() — the seeds' StreamProcessor."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Literal, Mapping

import psycopg
from psycopg_pool import PoolTimeout

from core import wording
from core.agents import AgentConfig, AgentDeps, BaseAgent, Finished, RunContext, UnknownAgentType, agent_class
from core.agents.state import RunState, RunStateError
from core.attachments import prepare_attachments
from core.history import TurnHistory, content_text
from core.config import Settings
from core.events import Done, Event, Failed, SourceItem, Sources, ToolCallFinished, ToolCallStarted
from core.llm import LLMClient, ModelInfo, resolve_model
from core.notifier import Notifier
from core.requests import Actor, Request
from core.retrieval.retriever import Retriever
from core.store.continuations import ContinuationRow, ContinuationStore, Decision
from core.store.conversations import ConversationStore
from core.store.db import Database
from core.store.locks import ConversationLocks
from core.tokens import TokenCounter, get_token_counter
from core.tools import ApprovalPolicy, ToolExecutor, ToolRegistry
from core.tools.internal_search import INTERNAL_SEARCH as INTERNAL_SEARCH_TOOL

log = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are relaybot, a helpful assistant for a team, answering in a chat thread. Answer from the team's "
    "documents when they are relevant and cite them as [n]; say so when you do not know. Be concise and use "
    "Markdown sparingly. Use tools when they help."
)
# Events that end a run; they are yielded after the conversation lock is released.
ENDING_KINDS = frozenset({"sources", "done", "failed", "approval_required"})
DATABASE_UNAVAILABLE = "I can't reach my database right now, so I can't answer. Please try again in a minute."

DecisionStatus = Literal["recorded", "ready", "not_allowed", "already_decided", "already_handled", "expired", "not_found"]


@dataclass(frozen=True, kw_only=True)
class DecisionOutcome:
    """What a click did; `message` is the sentence to show the clicker."""

    status: DecisionStatus
    message: str
    continuation: ContinuationRow | None = None

    @property
    def accepted(self) -> bool:
        return self.status in ("recorded", "ready")


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """An agent run ready to go: its events, and who asked what (for the stored turn)."""

    agent: BaseAgent
    events: AsyncIterator[Event]
    author: str
    question: str


@dataclass(kw_only=True)
class ChatResult:
    """The agent_chat contract for non-streaming callers."""

    answer: str = ""
    final_answer: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    sources: list[SourceItem] = field(default_factory=list)
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
        tool_extras: Mapping[str, Any] | None = None,
        notifiers: dict[str, Notifier] | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.llm = llm
        self.retriever = retriever
        self.model: ModelInfo = resolve_model(
            settings.llm_model, upstream_id=settings.llm_upstream_model, overrides=settings.llm_model_overrides
        )
        self.planner_model = resolve_model(settings.agent_model) if settings.agent_model else self.model
        self.counter = counter or get_token_counter(self.model.upstream_id)
        self.registry = registry.with_approval_overrides(settings.tool_approval_overrides)
        if retriever is not None and INTERNAL_SEARCH_TOOL.name not in self.registry:
            # The agentic and research agents rely on it; the copy above keeps the caller's registry as it was.
            self.registry.register(INTERNAL_SEARCH_TOOL)
        self.executor = ToolExecutor(self.registry)
        self.policy = ApprovalPolicy(approvers=frozenset(settings.approvers), approver_roles=frozenset(settings.approver_roles))
        self.system_prompt = load_system_prompt(settings)
        self.conversations = ConversationStore(db)
        self.continuations = ContinuationStore(db)
        self.notifiers: dict[str, Notifier] = notifiers if notifiers is not None else {}
        self._tool_extras = dict(tool_extras or {})
        self.history = TurnHistory(self.conversations, self.counter)
        self._locks = ConversationLocks(db)
        self._active_runs = 0
        self._idle = asyncio.Event()
        self._idle.set()

    # ----- asking ---------------------------------------------------------------------------------

    async def ask(self, request: Request) -> AsyncIterator[Event]:
        """Answer a question as a stream of events."""
        try:
            cls = agent_class(request.agent_type or self.settings.agent_type)
        except UnknownAgentType as error:
            yield Failed(message=str(error), retryable=False)
            return
        with self._tracking():
            try:
                conversation_id = await self.conversations.get_or_create(request.conversation)
            except (psycopg.Error, PoolTimeout):
                log.exception("could not open the conversation")
                yield Failed(message=DATABASE_UNAVAILABLE, retryable=True)
                return
            turn_id = str(uuid.uuid4())

            async def prepare() -> RunPlan:
                # Under the lease: the previous run in this conversation has stored its turn.
                history = await self.history.load(conversation_id, thread_context=request.thread_context)
                attachments = prepare_attachments(request.attachments, model=self.model)
                query = request.question + (f"\n\n{attachments.text}" if attachments.text else "")
                context = RunContext(
                    conversation_id=conversation_id, conversation=request.conversation, user=request.user, turn_id=turn_id
                )
                agent = cls(deps=self._deps(), config=self._config(cls.agent_type, request), context=context)
                events = agent.gen(query, history=history, extra_parts=attachments.parts)
                return RunPlan(agent=agent, events=events, author=request.user.display, question=query)

            async for event in self._guard_database(self._locked_run(conversation_id, prepare)):
                yield event

    async def answer(self, request: Request) -> ChatResult:
        """Drain ask() into {answer, final_answer, tools, sources} for callers that do not stream."""
        return await collect(self.ask(request))

    # ----- approvals ------------------------------------------------------------------------------

    async def decide(
        self, continuation_id: str, *, call_id: str | None, approved: bool, actor: Actor, comment: str = ""
    ) -> DecisionOutcome:
        """Record one decision (or one for every undecided call when call_id is None)."""
        key = _parse_uuid(continuation_id)
        row = await self.continuations.get(key) if key else None
        if row is None:
            return DecisionOutcome(status="not_found", message=wording.approval_not_found())
        if not self.policy.may_decide(
            actor=actor.id, requested_by=row.requested_by, actor_roles=actor.roles, actor_is_admin=actor.is_admin
        ):
            return DecisionOutcome(status="not_allowed", message=self.policy.describe(row.requested_by), continuation=row)
        refusal = _refusal(row)
        if refusal is not None:
            return refusal
        decision = Decision(approved=approved, actor=actor.display, comment=comment)
        updated = await self.continuations.record_decision(row.id, call_id=call_id, decision=decision)
        if updated is None:
            current = await self.continuations.get(row.id)
            assert current is not None
            targets = current.call_ids if call_id is None else (call_id,)
            if targets and all(target in current.decisions for target in targets):
                # Someone decided first. The same decision again (a double click, or a click on a run a
                # crash reverted) may resume; a contrary one is refused, saying who decided.
                contrary = [current.decisions[t] for t in targets if current.decisions[t].approved != approved]
                if not contrary and not current.undecided and current.status == "pending":
                    return DecisionOutcome(status="ready", message="", continuation=current)
                if contrary or call_id is not None:
                    decided_by = (contrary or [current.decisions[targets[0]]])[0].actor
                    return DecisionOutcome(
                        status="already_decided", message=wording.call_already_decided(decided_by), continuation=current
                    )
            return _refusal(current) or DecisionOutcome(status="not_found", message=wording.approval_not_found())
        if updated.undecided:
            return DecisionOutcome(
                status="recorded", message=wording.decision_recorded(len(updated.undecided)), continuation=updated
            )
        return DecisionOutcome(status="ready", message="", continuation=updated)

    async def resume(
        self,
        continuation_id: str,
        decisions: Mapping[str, bool | Decision] | None = None,
        *,
        actor: Actor,
    ) -> AsyncIterator[Event]:
        """Record any given decisions, then claim the run exactly once and continue it."""
        for call_id, decision in (decisions or {}).items():
            approved = decision.approved if isinstance(decision, Decision) else bool(decision)
            comment = decision.comment if isinstance(decision, Decision) else ""
            outcome = await self.decide(continuation_id, call_id=call_id, approved=approved, actor=actor, comment=comment)
            if not outcome.accepted and outcome.status != "already_decided":
                yield Failed(message=outcome.message, retryable=False)
                return
        key = _parse_uuid(continuation_id)
        if key is None:
            yield Failed(message=wording.approval_not_found(), retryable=False)
            return
        current = await self.continuations.get(key)
        if current is not None and not self.policy.may_decide(
            actor=actor.id, requested_by=current.requested_by, actor_roles=actor.roles, actor_is_admin=actor.is_admin
        ):
            # Only someone who may decide may set the decided run going, even when others decided it.
            yield Failed(message=self.policy.describe(current.requested_by), retryable=False)
            return
        with self._tracking():
            row = await self.continuations.claim(key, actor=actor.display)
            if row is None:
                current = await self.continuations.get(key)
                refusal = _refusal(current) if current else None
                if current is not None and refusal is None and current.undecided:
                    message = wording.decision_recorded(len(current.undecided))
                else:
                    message = refusal.message if refusal else wording.approval_not_found()
                yield Failed(message=message, retryable=False)
                return
            agent: BaseAgent | None = None
            try:
                try:
                    state = RunState.from_json(row.state)
                    cls = agent_class(state.agent_type)
                except (RunStateError, UnknownAgentType) as error:
                    log.error("cannot resume %s: %s", key, error)
                    yield Failed(message=str(error), retryable=False)
                    return
                context = RunContext(
                    conversation_id=state.conversation_id,
                    conversation=state.conversation,
                    user=Actor(id=state.user_id, name=state.user_name),
                    turn_id=state.turn_id,
                )
                config = self._config(state.agent_type, None, temperature=state.temperature, max_tokens=state.max_tokens)
                agent = cls(deps=self._deps(), config=config, context=context)
                plan = RunPlan(
                    agent=agent,
                    events=agent.gen_continuation(state, row.decisions, continuation_id=key),
                    author=state.user_name or state.user_id,
                    question=content_text(state.messages[state.turn_start]),
                )

                async def prepared() -> RunPlan:
                    return plan

                async for event in self._guard_database(self._locked_run(state.conversation_id, prepared)):
                    yield event
            finally:
                # Finished or paused again: this continuation is done. A run that ended before any approved
                # call started (cancelled while waiting for the conversation, a database blip, a model
                # failure after rejections) goes back to pending so a click can resume it; once a call has
                # started, a failed run cannot be resumed twice.
                try:
                    if agent is not None and agent.outcome is not None:
                        await self.continuations.finish(key, status="done")
                    elif not await self.continuations.release(key, started_calls=len(row.started_calls)):
                        await self.continuations.finish(key, status="failed")
                except (psycopg.Error, PoolTimeout):
                    # The run already told the user how it ended; the stuck-run job tidies the row later.
                    log.exception("could not record how resumed run %s ended", key)

    async def withdraw_approval(self, continuation_id: str) -> bool:
        """Close a paused run whose approval request could not be shown; nothing of it will run."""
        key = _parse_uuid(continuation_id)
        return key is not None and await self.continuations.withdraw(key)

    # ----- scheduled maintenance ------------------------------------------------------------------

    async def expire_approvals(self) -> int:
        """Close approvals past their expiry and ask each platform to edit their messages."""
        expired = await self.continuations.expire_due()
        for row in expired:
            platform = str(row.state.get("conversation", {}).get("platform", ""))
            notifier = self.notifiers.get(platform)
            if notifier is None:
                continue
            try:
                await notifier.approval_expired(continuation_id=str(row.id), message_refs=row.message_refs)
            except Exception:
                log.exception("could not mark approval %s as expired on %s", row.id, platform)
        return len(expired)

    async def revert_stuck_runs(self, *, older_than_s: float = 600.0) -> int:
        """Runs a crash left in `resuming` go back to pending; their started calls never run again."""
        return len(await self.continuations.revert_stuck(older_than_s=older_than_s))

    async def drain(self, timeout_s: float) -> bool:
        """Wait up to timeout_s for running answers to end; True when none is left."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except asyncio.TimeoutError:
            return False
        return True

    @property
    def active_runs(self) -> int:
        return self._active_runs

    # ----- internals ------------------------------------------------------------------------------

    def _deps(self) -> AgentDeps:
        return AgentDeps(
            llm=self.llm,
            model=self.model,
            planner_model=self.planner_model,
            executor=self.executor,
            retriever=self.retriever,
            counter=self.counter,
            continuations=self.continuations,
            tool_extras=self._tool_extras,
        )

    def _config(
        self, agent_type: str, request: Request | None, *, temperature: float | None = None, max_tokens: int | None = None
    ) -> AgentConfig:
        settings = self.settings
        if request is not None:
            temperature = request.temperature if request.temperature is not None else settings.llm_temperature
            max_tokens = request.max_tokens if request.max_tokens is not None else settings.llm_max_tokens
        return AgentConfig(
            agent_type=agent_type,
            system_prompt=self.system_prompt,
            loop_limit=settings.agent_loop_limit,
            retrieval_chunks=settings.retrieval_chunks,
            retrieval_doc_tokens=settings.retrieval_doc_tokens,
            temperature=temperature,
            max_tokens=max_tokens if max_tokens and max_tokens > 0 else None,
            approval_expiry_s=settings.approval_expiry_s,
            base_tools=self.registry.names(),
        )

    def _tracking(self) -> "_RunTracker":
        return _RunTracker(self)

    async def _guard_database(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        """A database that blips mid-run ends the run with a sentence, never an exception in the adapter."""
        try:
            async for event in events:
                yield event
        except (psycopg.Error, PoolTimeout):
            log.exception("database failure during a run")
            yield Failed(message=DATABASE_UNAVAILABLE, retryable=True)

    async def _locked_run(
        self, conversation_id: int | None, prepare: Callable[[], Awaitable[RunPlan]]
    ) -> AsyncIterator[Event]:
        """Run under the conversation's lease; the events that end the run are yielded after it is given back.

        However long a platform takes to show the end, the next question in the conversation
        (whose history is already stored) need not wait for it.
        """
        ending: list[Event] = []
        async with self._locks.hold(conversation_id):
            plan = await prepare()
            async for event in self._persisting(plan.agent, plan.events, author=plan.author, question=plan.question):
                if event.kind in ENDING_KINDS:
                    ending.append(event)
                else:
                    yield event
        for event in ending:
            yield event

    async def _persisting(
        self, agent: BaseAgent, events: AsyncIterator[Event], *, author: str, question: str
    ) -> AsyncIterator[Event]:
        """Pass events through; store the whole turn before Done is yielded, the question alone on Failed."""
        context = agent.context
        async for event in events:
            if context.conversation_id is not None:
                if isinstance(event, Done) and isinstance(agent.outcome, Finished):
                    await self.history.store_turn(
                        context.conversation_id,
                        context.turn_id,
                        agent.outcome.turn_messages,
                        sources=agent.outcome.sources,
                        author=author,
                    )
                elif isinstance(event, Failed):
                    await self.history.store_question(context.conversation_id, context.turn_id, question=question, author=author)
            yield event


class _RunTracker:
    """Counts running answers so shutdown can wait for them."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def __enter__(self) -> None:
        self._engine._active_runs += 1
        self._engine._idle.clear()

    def __exit__(self, *exc_info: object) -> None:
        self._engine._active_runs -= 1
        if self._engine._active_runs == 0:
            self._engine._idle.set()


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
            case Failed():
                result.error = event.message
            case _ if event.kind == "answer_delta":
                result.answer += event.text  # type: ignore[union-attr]
            case _ if event.kind == "approval_required":
                result.continuation_id = event.continuation_id  # type: ignore[union-attr]
    return result


def _refusal(row: ContinuationRow) -> DecisionOutcome | None:
    if row.status == "expired" or (
        row.status == "pending" and row.expires_at is not None and row.expires_at <= datetime.now(timezone.utc)
    ):
        return DecisionOutcome(status="expired", message=wording.approval_expired(), continuation=row)
    if row.status != "pending":
        return DecisionOutcome(status="already_handled", message=wording.approval_already_handled(row.claimed_by), continuation=row)
    return None


def _parse_uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None
