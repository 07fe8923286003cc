"""Agent runs under the conversation lease: built from a request or a claimed pause, their ending stored as data."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, assert_never

import psycopg
from psycopg_pool import PoolTimeout

from core import metrics, observe, wording
from core.agents import AgentConfig, AgentDeps, AgentOutput, BaseAgent, Finished, Paused, RunContext, UnknownAgentType, agent_class
from core.agents.state import RunState, RunStateError
from core.attachments import prepare_attachments
from core.channels import ChannelConfig, ChannelResolver
from core.citations import cite
from core.config import Settings
from core.events import (
    AnswerDelta, ApprovalRequired, Done, Event, Failed, RunStarted, SourceItem, Sources, Stopped, ToolCallFinished,
    ToolCallStarted, Usage,
)
from core.history import TurnHistory, content_text
from core.llm import ModelInfo, resolve_model
from core.observe import RunTrace
from core.requests import Actor, ClientTool, ConversationKey, Request
from core.store.continuations import ContinuationRow, ContinuationStore, StoredCall
from core.store.conversations import ConversationStore
from core.store.locks import ConversationLocks
from core.store.usage import TurnUsage, UsageLog
from core.stops import RunStops, StopResult, StopSignal
from core.tools import ToolExecutor
from core.tools.client_tools import client_tools_from_json, with_client_tools

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
    # The sentence the answer opens with when an attached file was left out (core.attachments), else "".
    notice: str = ""


class Runs:
    """Starts agent runs and stores how each ended: a finished turn, a saved pause, the question alone
    after a failure — or, once an approved call started, the turn so far, whatever stopped it."""

    def __init__(
        self,
        *,
        settings: Settings,
        deps: AgentDeps,
        system_prompt: str,
        base_tools: Callable[[], tuple[str, ...]],
        conversations: ConversationStore,
        continuations: ContinuationStore,
        history: TurnHistory,
        locks: ConversationLocks,
        usage: UsageLog | None = None,
        channels: ChannelResolver | None = None,
        stops: RunStops | None = None,
    ) -> None:
        self._settings = settings
        # Each run reads its channel's settings afresh (core/channels.py); without a resolver, the settings alone.
        self._channels = channels or ChannelResolver(settings=settings, source=None)
        self._models: dict[str, ModelInfo] = {deps.model.name: deps.model}
        self._deps = deps
        self._system_prompt = system_prompt
        # Read at the start of each run: MCP tools come and go with their servers.
        self._base_tools = base_tools
        self._conversations = conversations
        self._continuations = continuations
        self._history = history
        self._locks = locks
        self._usage = usage
        # Stop buttons: each run is registered while it goes and cancelled when someone asks (core/stops.py).
        self.stops = stops
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
            channel = await self._channels.resolve(request.conversation)
        except (psycopg.Error, PoolTimeout):
            log.exception("could not read the channel's settings")
            _report_unstarted(request.conversation.platform, "the database is unavailable")
            yield Failed(message=wording.database_unavailable(), retryable=True)
            return
        try:
            cls = agent_class(request.agent_type or channel.agent_type)
            # The engine's tools plus the client's own for this run (a name taken or malformed refuses it).
            executor = with_client_tools(self._deps.executor, request.client_tools)
        except (UnknownAgentType, ValueError) as error:
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
                    conversation_id=conversation_id, conversation=request.conversation, user=request.user, turn_id=turn_id,
                    question=request.question,  # the asker's own words, without the attached files' text
                )
                agent = cls(
                    deps=self._deps_for(channel.model, executor), config=self.config(cls.agent_type, request, channel=channel),
                    context=context,
                )
                outputs = agent.gen(query, history=history, extra_parts=attachments.parts)
                return RunPlan(agent=agent, outputs=outputs, author=request.user.display, question=query,
                               notice=attachments.notice)

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
                client_tools = client_tools_from_json(state.client_tools)
                executor = with_client_tools(self._deps.executor, client_tools)
            except (RunStateError, UnknownAgentType, ValueError, KeyError) as error:
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
                question=state.question,
            )
            # The channel's settings as they are now (scope, tools, rules); the model the run began with.
            channel = await self._channels.resolve(state.conversation)
            config = self.config(
                state.agent_type, None, temperature=state.temperature, max_tokens=state.max_tokens, channel=channel,
                client_tools=client_tools, response_format=state.response_format,
                sources=tuple(state.request_sources) if state.request_sources is not None else None,
            )
            agent = cls(deps=self._deps_for(state.model, executor), config=config, context=context)

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
        self, agent_type: str, request: Request | None, *, temperature: float | None = None, max_tokens: int | None = None,
        channel: ChannelConfig | None = None, client_tools: tuple[ClientTool, ...] = (),
        response_format: dict[str, Any] | None = None, sources: tuple[str, ...] | None = None,
    ) -> AgentConfig:
        settings = self._settings
        if request is not None:
            client_tools, response_format, sources = request.client_tools, request.response_format, request.sources
            temperature = request.temperature if request.temperature is not None else settings.llm_temperature
            max_tokens = request.max_tokens if request.max_tokens is not None else settings.llm_max_tokens
        scope = channel.scope if channel is not None else None
        if scope is not None and sources is not None:
            # A request may narrow the channel's sources (an API key's), never widen them.
            only = sources if scope.only is None else tuple(n for n in scope.only if n in sources)
            scope = replace(scope, only=only)
        return AgentConfig(
            agent_type=agent_type,
            system_prompt=self._system_prompt + (f"\n\n{channel.system_prompt}" if channel and channel.system_prompt else ""),
            loop_limit=settings.agent_loop_limit,
            retrieval_chunks=settings.retrieval_chunks,
            retrieval_doc_tokens=settings.retrieval_doc_tokens,
            temperature=temperature,
            max_tokens=max_tokens if max_tokens and max_tokens > 0 else None,
            base_tools=tuple(name for name in self._base_tools() if channel is None or channel.allows_tool(name)),
            source_scope=scope,
            tool_rules=channel.tool_rules if channel is not None else {},
            client_tools=client_tools,
            response_format=response_format,
            request_sources=sources,
        )

    def _deps_for(self, model: str, executor: ToolExecutor | None = None) -> AgentDeps:
        """The engine's dependencies with this model (a channel may name its own) and, for a run with client
        tools, its own executor."""
        deps = self._deps if executor is None or executor is self._deps.executor else replace(self._deps, executor=executor)
        if model == deps.model.name:
            return deps
        info = self._models.get(model)
        if info is None:
            info = self._models[model] = resolve_model(model, overrides=self._settings.llm_model_overrides)
        return replace(deps, model=info)

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
                    async with self._registered(plan) as signal, aclosing(plan.outputs) as outputs:
                        if signal is not None:
                            context = plan.agent.context
                            yield RunStarted(run_id=context.turn_id, asked_by=context.user.id)
                        if plan.notice:
                            # Said by the engine itself, first: whatever the model writes, the asker knows.
                            yield AnswerDelta(text=_notice_lead(plan.notice))
                        # The text shown since the last tool call: what a stopped run's stored turn keeps
                        # (the text of earlier rounds is already in their assistant messages).
                        since_tools: list[str] = []
                        while (output := await _next_or_stop(outputs, signal)) is not _ENDED:
                            match output:
                                case None:
                                    assert signal is not None
                                    ended = True
                                    ending.extend(await asyncio.shield(self._end_stopped(plan, "".join(since_tools), signal.by)))
                                    outcome = "stopped"
                                    break
                                case Finished() | Paused() | Failed():
                                    ended = True
                                    if signal is not None:
                                        signal.finish()  # a Stop from now on is too late: the answer is whole
                                    usage = output.usage if isinstance(output, Finished) else (
                                        output.state.usage if isinstance(output, Paused) else None
                                    )
                                    # Shielded: a shutdown arriving now must not cut the turn's storing short.
                                    ending.extend(await asyncio.shield(self._end(plan, output)))
                                    outcome = _outcome(ending)
                                    if signal is not None:
                                        signal.outcome = outcome
                                case _:
                                    if isinstance(output, AnswerDelta):
                                        since_tools.append(output.text)
                                    elif isinstance(output, (ToolCallStarted, ToolCallFinished)):
                                        since_tools.clear()
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

    async def stop(self, run_id: str, *, actor: Actor, mention: Callable[[str], str] = str, admins: bool = True) -> StopResult:
        """A Stop click on run `run_id` (its turn id), from any process: the asker, an approver or an admin."""
        if self.stops is None:
            return StopResult(outcome="not_found", message=wording.stop_not_found())
        return await self.stops.request(run_id, actor=actor, mention=mention, admins=admins)

    @asynccontextmanager
    async def _registered(self, plan: RunPlan) -> AsyncIterator[StopSignal | None]:
        """The run registered for Stop while it goes; without a registry (or its row) it runs without a Stop."""
        if self.stops is None:
            yield None
            return
        context = plan.agent.context
        try:
            registration = self.stops.running(context.turn_id, context.conversation, asked_by=context.user.id)
            signal = await registration.__aenter__()
        except (psycopg.Error, PoolTimeout):
            log.warning("could not register run %s for Stop; it runs without one", context.turn_id, exc_info=True)
            yield None
            return
        try:
            yield signal
        finally:
            await registration.__aexit__(None, None, None)

    async def _end_stopped(self, plan: RunPlan, shown: str, by: str) -> list[Event]:
        """A run someone stopped: its turn as far as it went (every tool round complete, calls not started marked
        so), then the text shown since the last tool call with the stop sentence — the assistant's last message,
        marked stopped by that sentence. Its row in run_stops says `stopped` and by whom."""
        progress = plan.agent.progress()
        note = wording.stopped_by(by)
        messages = list(progress.turn_messages) or [{"role": "user", "content": plan.question}]
        text = shown.strip()
        messages.append({"role": "assistant", "content": f"{text}\n\n{note}" if text else note})
        try:
            await self._store(plan, messages, sources=progress.sources)
        except (psycopg.Error, PoolTimeout):
            log.exception("could not store stopped turn %s", plan.agent.context.turn_id)
        message = wording.stopped_after_tools_ran(progress.ran, by) if progress.ran else note
        return [Stopped(message=message, by=by)]

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
        # A citation that names no source is dropped from what is stored and from Done; the surfaces
        # clean what they streamed with the same function, so every copy of the answer agrees.
        cited = cite(finished.answer, finished.sources)
        if cited.removed:
            log.info(
                "removed citations of no source from the answer: %s (%d sources)",
                ", ".join(f"[{n}]" for n in cited.removed), len(finished.sources),
                extra={"event": "citations_removed", "removed": list(cited.removed), "sources": len(finished.sources)},
            )
        turn_messages = [_cleaned(message, finished.sources) for message in finished.turn_messages]
        await self._store(plan, turn_messages, sources=finished.sources)
        sources: list[Event] = [Sources(items=tuple(finished.sources))] if finished.sources else []
        answer = _notice_lead(plan.notice) + cited.text if plan.notice else cited.text
        return [*sources, Done(answer=answer, usage=finished.usage)]

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
        client_calls = {call.call_id for call in paused.calls if call.client}
        expires = datetime.now(timezone.utc).timestamp() + self._settings.approval_expiry_s
        continuation_id = await self._continuations.save(
            conversation_id=state.conversation_id,
            schema_version=state.schema_version,
            state=state.to_json(),
            calls=tuple(
                StoredCall(call_id=call.call_id, tool=call.tool, arguments=call.arguments, description=descriptions.get(call.call_id, ""),
                           client=call.call_id in client_calls)
                for call in state.pending
            ),
            requested_by=state.user_id,
            expires_at=datetime.fromtimestamp(expires, timezone.utc),
            platform=state.conversation.platform,
        )
        return ApprovalRequired(
            continuation_id=str(continuation_id), calls=paused.calls, requested_by=state.user_id, expires_at=expires,
            usage=state.usage,
        )


_ENDED = object()


async def _next_or_stop(outputs: AsyncIterator[AgentOutput], signal: StopSignal | None) -> Any:
    """The agent's next output; None when a stop came first (the step is cancelled where it waits: the
    model's stream closes, a tool call in progress is cut off and one not started never starts); `_ENDED`
    at the end."""
    try:
        if signal is None:
            return await anext(outputs)
        went, output = await signal.step(anext(outputs))
    except StopAsyncIteration:
        return _ENDED
    if not went:
        return None
    # A step that ended the run as the stop came in: the run ended on its own.
    return output if isinstance(output, (Finished, Paused, Failed)) or not signal.is_set() else None


def _label(key: ConversationKey) -> str:
    return observe.conversation_label(platform=key.platform, workspace=key.workspace, channel=key.channel, thread=key.thread)


def _cleaned(message: dict[str, Any], sources: Sequence[SourceItem]) -> dict[str, Any]:
    """An assistant message of the turn as stored: without citations that name no source."""
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, str):
        return message
    return {**message, "content": cite(content, sources).text}


def _notice_lead(notice: str) -> str:
    return f"{notice}\n\n"


def _outcome(ending: Sequence[Event]) -> str:
    if any(isinstance(event, Stopped) for event in ending):
        return "stopped"
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
