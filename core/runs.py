"""Agent runs under the conversation lease: built from a request or a claimed pause, their ending stored as data."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, assert_never

import psycopg
from psycopg_pool import PoolTimeout

from core import metrics, observe, wording
from core.agents import AgentConfig, AgentDeps, AgentOutput, BaseAgent, Finished, Paused, RunContext, UnknownAgentType, agent_class
from core.agents.state import RunState, RunStateError
from core.attachments import prepare_attachments
from core.config import Settings
from core.events import ApprovalRequired, Done, Event, Failed, SourceItem, Sources, Usage
from core.history import TurnHistory, content_text
from core.observe import RunTrace
from core.requests import Actor, ConversationKey, Request
from core.store.continuations import ContinuationRow, ContinuationStore, StoredCall
from core.store.conversations import ConversationStore
from core.store.locks import ConversationLocks
from core.store.usage import TurnUsage, UsageLog

log = logging.getLogger(__name__)

# A turn whose approved calls ran cannot simply be asked again, so storing it is worth more tries
# than one: a database blip kills pooled connections, and each try takes another.
STORE_ATTEMPTS_AFTER_CALLS = 3


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """An agent run ready to go: its outputs, and who asked what (for the stored turn)."""

    agent: BaseAgent
    outputs: AsyncIterator[AgentOutput]
    author: str
    question: str
    # Tokens the turn had used before this run (a resumed run's state carries the paused part's).
    baseline: Usage = Usage()


class Runs:
    """Starts agent runs and stores how each ended: a finished turn, a saved pause, the question alone
    after a failure — or, once an approved call started, the turn so far, whatever stopped it."""

    def __init__(
        self,
        *,
        settings: Settings,
        deps: AgentDeps,
        system_prompt: str,
        base_tools: tuple[str, ...],
        conversations: ConversationStore,
        continuations: ContinuationStore,
        history: TurnHistory,
        locks: ConversationLocks,
        usage: UsageLog | None = None,
    ) -> None:
        self._settings = settings
        self._deps = deps
        self._system_prompt = system_prompt
        self._base_tools = base_tools
        self._conversations = conversations
        self._continuations = continuations
        self._history = history
        self._locks = locks
        self._usage = usage
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def active(self) -> int:
        return self._active

    async def drain(self, timeout_s: float) -> bool:
        """Wait up to timeout_s for running answers to end; True when none is left."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except asyncio.TimeoutError:
            return False
        return True

    async def ask(self, request: Request) -> AsyncIterator[Event]:
        """A new run for a question."""
        key = request.conversation
        with observe.run_scope(platform=key.platform, conversation=_label(key)):
            async with aclosing(self._ask(request)) as events:
                async for event in events:
                    yield event

    async def _ask(self, request: Request) -> AsyncIterator[Event]:
        try:
            cls = agent_class(request.agent_type or self._settings.agent_type)
        except UnknownAgentType as error:
            _report_unstarted(request.conversation.platform, str(error))
            yield Failed(message=str(error), retryable=False)
            return
        with self._tracking():
            try:
                conversation_id = await self._conversations.get_or_create(request.conversation)
            except (psycopg.Error, PoolTimeout):
                log.exception("could not open the conversation")
                _report_unstarted(request.conversation.platform, "the database is unavailable")
                yield Failed(message=wording.database_unavailable(), retryable=True)
                return
            turn_id = str(uuid.uuid4())

            async def prepare() -> RunPlan:
                # Under the lease: the previous run in this conversation has stored its turn.
                history = await self._history.load(conversation_id, thread_context=request.thread_context)
                attachments = prepare_attachments(request.attachments, model=self._deps.model)
                query = request.question + (f"\n\n{attachments.text}" if attachments.text else "")
                context = RunContext(
                    conversation_id=conversation_id, conversation=request.conversation, user=request.user, turn_id=turn_id
                )
                agent = cls(deps=self._deps, config=self.config(cls.agent_type, request), context=context)
                outputs = agent.gen(query, history=history, extra_parts=attachments.parts)
                return RunPlan(agent=agent, outputs=outputs, author=request.user.display, question=query)

            async with aclosing(self._guard_database(self._locked_run(conversation_id, prepare))) as events:
                async for event in events:
                    yield event

    async def resume(self, row: ContinuationRow) -> AsyncIterator[Event]:
        """Continue a paused run that the caller has claimed; approved calls run at most once."""
        with observe.run_scope(platform=row.platform):
            async with aclosing(self._resume(row)) as events:
                async for event in events:
                    yield event

    async def _resume(self, row: ContinuationRow) -> AsyncIterator[Event]:
        with self._tracking():
            try:
                state = RunState.from_json(row.state)
                cls = agent_class(state.agent_type)
            except (RunStateError, UnknownAgentType) as error:
                log.error("cannot resume %s: %s", row.id, error)
                _report_unstarted(row.platform, str(error))
                yield Failed(message=str(error), retryable=False)
                return
            observe.name_conversation(_label(state.conversation))
            context = RunContext(
                conversation_id=state.conversation_id,
                conversation=state.conversation,
                user=Actor(id=state.user_id, name=state.user_name),
                turn_id=state.turn_id,
            )
            config = self.config(state.agent_type, None, temperature=state.temperature, max_tokens=state.max_tokens)
            agent = cls(deps=self._deps, config=config, context=context)

            async def mark_started(call_id: str) -> bool:
                return await self._continuations.mark_started(row.id, call_id)

            plan = RunPlan(
                agent=agent,
                outputs=agent.gen_continuation(state, row.decisions, mark_started=mark_started),
                author=state.user_name or state.user_id,
                question=content_text(state.messages[state.turn_start]),
                baseline=state.usage,
            )

            async def prepared() -> RunPlan:
                return plan

            async with aclosing(self._guard_database(self._locked_run(state.conversation_id, prepared))) as events:
                async for event in events:
                    yield event

    def config(
        self, agent_type: str, request: Request | None, *, temperature: float | None = None, max_tokens: int | None = None
    ) -> AgentConfig:
        settings = self._settings
        if request is not None:
            temperature = request.temperature if request.temperature is not None else settings.llm_temperature
            max_tokens = request.max_tokens if request.max_tokens is not None else settings.llm_max_tokens
        return AgentConfig(
            agent_type=agent_type,
            system_prompt=self._system_prompt,
            loop_limit=settings.agent_loop_limit,
            retrieval_chunks=settings.retrieval_chunks,
            retrieval_doc_tokens=settings.retrieval_doc_tokens,
            temperature=temperature,
            max_tokens=max_tokens if max_tokens and max_tokens > 0 else None,
            base_tools=self._base_tools,
        )

    # ----- internals ------------------------------------------------------------------------------

    def _tracking(self) -> _RunTracker:
        return _RunTracker(self)

    async def _guard_database(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        """A database that blips mid-run ends the run with a sentence, never an exception in the adapter."""
        try:
            async with aclosing(events):
                async for event in events:
                    yield event
        except (psycopg.Error, PoolTimeout):
            log.exception("database failure during a run")
            yield Failed(message=wording.database_unavailable(), retryable=True)

    async def _locked_run(
        self, conversation_id: int | None, prepare: Callable[[], Awaitable[RunPlan]]
    ) -> AsyncIterator[Event]:
        """Run under the conversation's lease; the events that end the run are yielded after it is given back.

        However long a platform takes to show the end, the next question in the conversation
        (whose history is already stored) need not wait for it.
        """
        ending: list[Event] = []
        started = time.monotonic()
        plan: RunPlan | None = None
        trace: RunTrace | None = None
        outcome = "cancelled"  # unless it ends otherwise
        usage: Usage | None = None
        try:
            async with self._locks.hold(conversation_id):
                plan = await prepare()
                trace = RunTrace(
                    platform=plan.agent.context.conversation.platform, agent=plan.agent.config.agent_type,
                    model=plan.agent.deps.model.name, started=started,
                )
                ended = False
                try:
                    async with aclosing(plan.outputs) as outputs:
                        async for output in outputs:
                            match output:
                                case Finished() | Paused() | Failed():
                                    ended = True
                                    usage = output.usage if isinstance(output, Finished) else (
                                        output.state.usage if isinstance(output, Paused) else None
                                    )
                                    # Shielded: a shutdown arriving now must not cut the turn's storing short.
                                    ending.extend(await asyncio.shield(self._end(plan, output)))
                                    outcome = _outcome(ending)
                                case _:
                                    trace.see(output)
                                    yield output
                finally:
                    if not ended:
                        # Cancelled at shutdown or dropped by its consumer mid-run: calls that ran stay on record.
                        await asyncio.shield(self._keep_progress(plan))
        except Exception:
            outcome = "failed"
            raise
        finally:
            if plan is not None and trace is not None:
                await asyncio.shield(self._report(plan, trace, outcome, usage))
        for event in ending:
            yield event

    async def _report(self, plan: RunPlan, trace: RunTrace, outcome: str, usage: Usage | None) -> None:
        """The answer line, the answer metrics, and the turn's tokens in the usage table."""
        used = usage if usage is not None else _usage_so_far(plan.agent)
        tokens_in = max(0, used.prompt_tokens - plan.baseline.prompt_tokens)
        tokens_out = max(0, used.completion_tokens - plan.baseline.completion_tokens)
        total_s = trace.elapsed_s()
        first_token_s = trace.first_token_s
        log.info(
            "answer %s on %s: agent %s, model %s, first text after %s, total %.2f s, tokens in %d / out %d, tools: %s",
            outcome, trace.platform, trace.agent, trace.model,
            "-" if first_token_s is None else f"{first_token_s:.2f} s", total_s, tokens_in, tokens_out,
            ", ".join(trace.tools) or "none",
            extra={
                "event": "answer", "platform": trace.platform, "agent": trace.agent, "model": trace.model,
                "outcome": outcome, "first_token_s": None if first_token_s is None else round(first_token_s, 3),
                "total_s": round(total_s, 3), "tokens_in": tokens_in, "tokens_out": tokens_out, "tools": trace.tools,
            },
        )
        metrics.record_answer(
            platform=trace.platform, outcome=outcome, model=trace.model, first_token_s=first_token_s, total_s=total_s,
            tokens_in=tokens_in, tokens_out=tokens_out,
        )
        if self._usage is None or not (tokens_in or tokens_out):
            return
        context = plan.agent.context
        try:
            await self._usage.add(TurnUsage(
                turn_id=context.turn_id, platform=context.conversation.platform, workspace=context.conversation.workspace,
                channel=context.conversation.channel, user=context.user.id, model=trace.model,
                prompt_tokens=tokens_in, completion_tokens=tokens_out,
            ))
        except (psycopg.Error, PoolTimeout):
            # The answer is what matters; its tokens are still counted in the metrics and the log line.
            log.warning("could not store the token usage of turn %s", context.turn_id, exc_info=True)

    async def _end(self, plan: RunPlan, output: Finished | Paused | Failed) -> list[Event]:
        """Store how the run ended; once approved calls ran, even a database failure says so."""
        try:
            match output:
                case Finished():
                    return await self._store_finished(plan, output)
                case Paused():
                    return [await self._save_pause(plan, output)]
                case Failed():
                    return [await self._store_failed(plan, output)]
                case _:
                    assert_never(output)
        except (psycopg.Error, PoolTimeout):
            ran = plan.agent.ran
            if not ran:
                raise
            log.exception("database failure while ending a run whose approved calls ran")
            message = wording.stopped_after_tools(ran, wording.database_unavailable())
            if isinstance(output, Paused):
                await self._keep_progress(plan, shown=message)
            return [Failed(message=message, retryable=False)]

    async def _store_finished(self, plan: RunPlan, finished: Finished) -> list[Event]:
        await self._store(plan, finished.turn_messages, sources=finished.sources)
        sources: list[Event] = [Sources(items=tuple(finished.sources))] if finished.sources else []
        return [*sources, Done(answer=finished.answer, usage=finished.usage)]

    async def _store_failed(self, plan: RunPlan, failed: Failed) -> Failed:
        """The question alone when nothing was approved and run; otherwise the turn so far, and a
        sentence saying what ran (asking again would ask to run it again)."""
        ran = plan.agent.ran
        if not ran:
            await self._store_question(plan)
            return failed
        message = wording.stopped_after_tools(ran, failed.message)
        await self._keep_progress(plan, shown=message)
        return Failed(message=message, retryable=False)

    async def _keep_progress(self, plan: RunPlan, *, shown: str | None = None) -> None:
        """Store the turn so far once an approved call started; `shown` is what the user was told."""
        progress = plan.agent.progress()
        if not progress.ran:
            return
        messages = [*progress.turn_messages, *([{"role": "assistant", "content": shown}] if shown else [])]
        try:
            await self._store(plan, messages, sources=progress.sources)
        except (psycopg.Error, PoolTimeout):
            log.exception("could not store turn %s, whose approved calls ran", plan.agent.context.turn_id)

    async def _store(self, plan: RunPlan, turn_messages: Sequence[dict[str, Any]], *, sources: Sequence[SourceItem]) -> None:
        context = plan.agent.context
        if context.conversation_id is None:
            return
        attempts = STORE_ATTEMPTS_AFTER_CALLS if plan.agent.ran else 1
        for attempt in range(1, attempts + 1):
            try:
                await self._history.store_turn(
                    context.conversation_id, context.turn_id, turn_messages, sources=sources, author=plan.author
                )
                return
            except psycopg.OperationalError:
                if attempt == attempts:
                    raise
                log.warning("could not store turn %s (try %d); trying another connection", context.turn_id, attempt)

    async def _store_question(self, plan: RunPlan) -> None:
        context = plan.agent.context
        if context.conversation_id is not None:
            await self._history.store_question(
                context.conversation_id, context.turn_id, question=plan.question, author=plan.author
            )

    async def _save_pause(self, plan: RunPlan, paused: Paused) -> ApprovalRequired:
        """The pause is committed before ApprovalRequired is yielded, so a click always finds it."""
        state = paused.state
        descriptions = {call.call_id: call.description for call in paused.calls}
        expires = datetime.now(timezone.utc).timestamp() + self._settings.approval_expiry_s
        continuation_id = await self._continuations.save(
            conversation_id=state.conversation_id,
            schema_version=state.schema_version,
            state=state.to_json(),
            calls=tuple(
                StoredCall(call_id=call.call_id, tool=call.tool, arguments=call.arguments, description=descriptions.get(call.call_id, ""))
                for call in state.pending
            ),
            requested_by=state.user_id,
            expires_at=datetime.fromtimestamp(expires, timezone.utc),
            platform=state.conversation.platform,
        )
        return ApprovalRequired(
            continuation_id=str(continuation_id), calls=paused.calls, requested_by=state.user_id, expires_at=expires
        )


def _label(key: ConversationKey) -> str:
    return observe.conversation_label(platform=key.platform, workspace=key.workspace, channel=key.channel, thread=key.thread)


def _outcome(ending: Sequence[Event]) -> str:
    if any(isinstance(event, Failed) for event in ending):
        return "failed"
    return "approval" if any(isinstance(event, ApprovalRequired) for event in ending) else "answered"


def _usage_so_far(agent: BaseAgent) -> Usage:
    """What a run that failed or stopped had used: its loop state's count (the agent keeps no other)."""
    state = getattr(agent, "_state", None)
    return state.usage if isinstance(state, RunState) else Usage()


def _report_unstarted(platform: str, reason: str) -> None:
    """A run that failed before it started still counts, as a failed answer of no tokens."""
    log.info("answer failed on %s before it started: %s", platform, reason,
             extra={"event": "answer", "platform": platform, "outcome": "failed", "tokens_in": 0, "tokens_out": 0})
    metrics.record_answer(platform=platform, outcome="failed", model="", first_token_s=None, total_s=None,
                          tokens_in=0, tokens_out=0)


class _RunTracker:
    """Counts running answers so shutdown can wait for them."""

    def __init__(self, runs: Runs) -> None:
        self._runs = runs

    def __enter__(self) -> None:
        self._runs._active += 1
        self._runs._idle.clear()

    def __exit__(self, *exc_info: object) -> None:
        self._runs._active -= 1
        if self._runs._active == 0:
            self._runs._idle.set()
