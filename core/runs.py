"""Agent runs under the conversation lease: built from a request or a claimed pause, played to their ending."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import aclosing, asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from core import observe, wording
from core.agents import AgentConfig, AgentDeps, AgentOutput, Finished, Paused, RunContext, UnknownAgentType, agent_class
from core.agents.state import RunState, RunStateError
from core.attachments import prepare_attachments
from core.channels import ChannelConfig, ChannelResolver, answer_scope
from core.config import Settings
from core.events import AnswerDelta, Event, Failed, RunStarted, ToolCallFinished, ToolCallStarted, Usage
from core.history import TurnHistory, content_text
from core.llm import ModelInfo, resolve_model
from core.observe import RunTrace
from core.person_limits import admitted, charged
from core.requests import Actor, ClientTool, ConversationKey, Request
from core.run_endings import RunEndings, RunPlan, notice_lead, outcome_of, report_answer, report_unstarted
from core.store.continuations import ContinuationRow, ContinuationStore
from core.store.conversations import ConversationStore
from core.store.locks import ConversationLocks
from core.store.usage import UsageLog
from core.stops import RunStops, StopResult, StopSignal
from core.tools import ToolExecutor
from core.tools.client_tools import client_tools_from_json, with_client_tools

__all__ = ["RunNeeds", "RunPlan", "Runs"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RunNeeds:
    """What runs need from their surroundings: the settings, the agents' dependencies, and the stores a run
    reads and writes (built once by the composition root)."""

    settings: Settings
    deps: AgentDeps
    system_prompt: str
    # Read at the start of each run: MCP tools come and go with their servers.
    base_tools: Callable[[], tuple[str, ...]]
    conversations: ConversationStore
    continuations: ContinuationStore
    history: TurnHistory
    locks: ConversationLocks
    usage: UsageLog | None = None
    # Each run reads its channel's settings afresh (core/channels.py); without a resolver, the settings alone.
    channels: ChannelResolver | None = None
    # Stop buttons: each run is registered while it goes and cancelled when someone asks (core/stops.py).
    stops: RunStops | None = None


@dataclass(kw_only=True)
class _Played:
    """One run as it goes under the lease: what the answer line reports, and the events that end it."""

    started: float
    plan: RunPlan | None = None
    trace: RunTrace | None = None
    outcome: str = "cancelled"  # unless it ends otherwise
    usage: Usage | None = None
    ending: list[Event] = field(default_factory=list)


class Runs:
    """Starts agent runs, one at a time per conversation, and plays each to its ending (stored by RunEndings)."""

    def __init__(self, needs: RunNeeds) -> None:
        settings, deps = needs.settings, needs.deps
        self._settings = settings
        self._channels = needs.channels or ChannelResolver(settings=settings, source=None)
        self._models: dict[str, ModelInfo] = {deps.model.name: deps.model}
        self._deps = deps
        self._needs = needs
        self._endings = RunEndings(
            history=needs.history, continuations=needs.continuations, approval_expiry_s=settings.approval_expiry_s
        )
        self.stops = needs.stops
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
            report_unstarted(request.conversation.platform, "the database is unavailable")
            yield Failed(message=wording.database_unavailable(), retryable=True)
            return
        try:
            cls = agent_class(request.agent_type or channel.agent_type)
            # The engine's tools plus the client's own for this run (a name taken or malformed refuses it).
            executor = with_client_tools(self._deps.executor, request.client_tools)
            deps = await admitted(self._deps_for(channel.model, executor), request.conversation, request.user, channel)
        except (UnknownAgentType, ValueError) as error:
            report_unstarted(request.conversation.platform, str(error))
            yield Failed(message=str(error), retryable=False)
            return
        with self._tracking():
            try:
                conversation_id = await self._needs.conversations.get_or_create(request.conversation)
            except (psycopg.Error, PoolTimeout):
                log.exception("could not open the conversation")
                report_unstarted(request.conversation.platform, "the database is unavailable")
                yield Failed(message=wording.database_unavailable(), retryable=True)
                return
            turn_id = str(uuid.uuid4())

            async def prepare() -> RunPlan:
                # Under the lease: the previous run in this conversation has stored its turn.
                history = await self._needs.history.load(conversation_id, thread_context=request.thread_context)
                attachments = await prepare_attachments(request.attachments, model=self._deps.model)
                query = request.question + (f"\n\n{attachments.text}" if attachments.text else "")
                context = RunContext(
                    conversation_id=conversation_id, conversation=request.conversation, user=request.user, turn_id=turn_id,
                    question=request.question,  # the asker's own words, without the attached files' text
                )
                agent = cls(
                    deps=deps, config=self.config(cls.agent_type, request, channel=channel),
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
                report_unstarted(row.platform, str(error))
                yield Failed(message=str(error), retryable=False)
                return
            observe.name_conversation(_label(state.conversation))
            context = RunContext(
                conversation_id=state.conversation_id, conversation=state.conversation, turn_id=state.turn_id,
                user=Actor(id=state.user_id, name=state.user_name), question=state.question,
            )
            # The channel's settings as they are now (scope, tools, rules); the model the run began with.
            channel = await self._channels.resolve(state.conversation)
            config = self.config(
                state.agent_type, None, temperature=state.temperature, max_tokens=state.max_tokens, channel=channel,
                client_tools=client_tools, response_format=state.response_format,
                sources=tuple(state.request_sources) if state.request_sources is not None else None,
            )
            agent = cls(deps=charged(self._deps_for(state.model, executor), state.conversation, context.user, channel), config=config, context=context)

            async def mark_started(call_id: str) -> bool:
                return await self._needs.continuations.mark_started(row.id, call_id)

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
        scope = answer_scope(channel.scope, sources=sources, request=request) if channel is not None else None
        reachable = self._deps.executor.registry.within_reach(self._needs.base_tools(), request.reaches if request else None)
        return AgentConfig(
            agent_type=agent_type,
            system_prompt=self._needs.system_prompt + (f"\n\n{channel.system_prompt}" if channel and channel.system_prompt else ""),
            loop_limit=settings.agent_loop_limit,
            retrieval_chunks=settings.retrieval_chunks,
            retrieval_doc_tokens=settings.retrieval_doc_tokens,
            temperature=temperature,
            max_tokens=max_tokens if max_tokens and max_tokens > 0 else None,
            base_tools=tuple(name for name in reachable if channel is None or channel.allows_tool(name)),
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

    @contextmanager
    def _tracking(self) -> Iterator[None]:
        """Counts running answers so shutdown can wait for them."""
        self._active += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._active -= 1
            if self._active == 0:
                self._idle.set()

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
        run = _Played(started=time.monotonic())
        try:
            async with self._needs.locks.hold(conversation_id):
                plan = run.plan = await prepare()
                run.trace = RunTrace(
                    platform=plan.agent.context.conversation.platform, agent=plan.agent.config.agent_type,
                    model=plan.agent.deps.model.name, started=run.started,
                )
                async with aclosing(self._play(run, plan, run.trace)) as events:
                    async for event in events:
                        yield event
        except Exception:
            run.outcome = "failed"
            raise
        finally:
            if run.plan is not None and run.trace is not None:
                await asyncio.shield(report_answer(run.plan, run.trace, run.outcome, run.usage, usage_log=self._needs.usage))
        for event in run.ending:
            yield event

    async def _play(self, run: _Played, plan: RunPlan, trace: RunTrace) -> AsyncIterator[Event]:
        """The run's events until it ends (kept in `run.ending`), is stopped, or is dropped mid-run."""
        ended = False
        try:
            async with self._registered(plan) as signal, aclosing(plan.outputs) as outputs:
                if signal is not None:
                    context = plan.agent.context
                    yield RunStarted(run_id=context.turn_id, asked_by=context.user.id)
                if plan.notice:
                    # Said by the engine itself, first: whatever the model writes, the asker knows.
                    yield AnswerDelta(text=notice_lead(plan.notice))
                # The text shown since the last tool call: what a stopped run's stored turn keeps
                # (the text of earlier rounds is already in their assistant messages).
                since_tools: list[str] = []
                while (output := await _next_or_stop(outputs, signal)) is not _ENDED:
                    if output is None:
                        assert signal is not None
                        ended = True
                        run.ending.extend(await asyncio.shield(self._endings.end_stopped(plan, "".join(since_tools), signal.by)))
                        run.outcome = "stopped"
                        break
                    if isinstance(output, (Finished, Paused, Failed)):
                        ended = True
                        await self._end(run, plan, output, signal)
                        continue
                    if isinstance(output, AnswerDelta):
                        since_tools.append(output.text)
                    elif isinstance(output, (ToolCallStarted, ToolCallFinished)):
                        since_tools.clear()
                    trace.see(output)
                    yield output
        finally:
            if not ended:
                # Cancelled at shutdown or dropped by its consumer mid-run: calls that ran stay on record.
                await asyncio.shield(self._endings.keep_progress(plan))

    async def _end(self, run: _Played, plan: RunPlan, output: Finished | Paused | Failed, signal: StopSignal | None) -> None:
        if signal is not None:
            signal.finish()  # a Stop from now on is too late: the answer is whole
        run.usage = output.usage if isinstance(output, Finished) else output.state.usage if isinstance(output, Paused) else None
        # Shielded: a shutdown arriving now must not cut the turn's storing short.
        run.ending.extend(await asyncio.shield(self._endings.end(plan, output)))
        run.outcome = outcome_of(run.ending)
        if signal is not None:
            signal.outcome = run.outcome

    async def stop(self, run_id: str, *, actor: Actor, mention: Callable[[str], str] = str, admins: bool = True,
                   team: str | None = None) -> StopResult:
        """A Stop click on run `run_id` (its turn id), from any process; from `team`, only that team's runs."""
        if self.stops is None:
            return StopResult(outcome="not_found", message=wording.stop_not_found())
        return await self.stops.request(run_id, actor=actor, mention=mention, admins=admins, team=team)

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


_ENDED = object()


async def _next_or_stop(outputs: AsyncIterator[AgentOutput], signal: StopSignal | None) -> Any:
    """The agent's next output; None when a stop came first (the step is cancelled where it waits: the model's stream
    closes, a tool call in progress is cut off and one not started never starts); `_ENDED` at the end."""
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
