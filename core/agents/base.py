"""BaseAgent: the streamed, quota-reserved model call and the tool loop with approval pauses and resumes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from abc import ABC, abstractmethod
from typing import Any, AsyncIterator, ClassVar, Mapping, Sequence

from core import wording
from core.agents.new_run import INTERNAL_SEARCH, MAX_DOCUMENT_FRACTION, NewRunSteps
from core.agents.run_values import (
    AgentConfig, AgentDeps, AgentOutput, Finished, MarkStarted, Paused, Progress, RunContext, RunEnd,
)
from core.agents.state import PendingToolCall, RunState
from core.agents.token_budget import HistoryTurn, complete_tool_rounds, plan_budget
from core.events import Event, AnswerDelta, Failed, PendingCall, ToolCallFinished, ToolCallStarted, ToolRun, Usage
from core.llm import Completion, LLMError, ModelInfo, TextPiece
from core.quota import Grant, QuotaExceeded, QuotaFailed, used_tokens
from core.sources import SourceCollector
from core.store.continuations import Decision
from core.text_safety import storable
from core.tools import ParsedCall, ToolCallRequest, ToolContext, ToolResult, truncate_middle

# Kept importable from here: the agent types and the engine import these names from core.agents.base.
__all__ = [
    "INTERNAL_SEARCH", "MAX_DOCUMENT_FRACTION", "AgentConfig", "AgentDeps", "AgentOutput", "BaseAgent", "Finished",
    "MarkStarted", "Paused", "Progress", "RunContext", "RunEnd",
]

log = logging.getLogger(__name__)

TOOL_OUTPUT_MAX_TOKENS = 2000
TOOL_OUTPUT_MIN_TOKENS = 64
PREVIEW_CHARS = 300


class BaseAgent(NewRunSteps, ABC):
    """Template: gen() wraps the subclass's _gen_inner() and turns every failure into a Failed event."""

    agent_type: ClassVar[str]
    # Which sources internal_search looks in for this agent type; None = every source not `off`.
    search_exposure: ClassVar[str | None] = None

    def __init__(self, *, deps: AgentDeps, config: AgentConfig, context: RunContext) -> None:
        self.deps = deps
        self.config = config
        self.context = context
        self.sources = SourceCollector()
        # What progress() reads when a run stops early: the state being looped, the results of
        # the round in progress, and the approved calls started in this run.
        self._state: RunState | None = None
        self._round: list[ToolResult] = []
        self._ran: dict[str, ToolRun] = {}

    # ----- entry points -------------------------------------------------------------------------

    async def gen(
        self, query: str, *, history: Sequence[HistoryTurn] = (), extra_parts: Sequence[dict[str, Any]] = ()
    ) -> AsyncIterator[AgentOutput]:
        """Events, ending in Finished or Paused (or a Failed event)."""
        async for event in self._guarded(self._gen_inner(query, history=history, extra_parts=extra_parts)):
            yield event

    async def gen_continuation(
        self, state: RunState, decisions: Mapping[str, Decision], *, mark_started: MarkStarted
    ) -> AsyncIterator[AgentOutput]:
        """Resume a paused run: run approved calls once, report rejected ones, continue the loop.

        `mark_started(call_id)` records that a call is about to run and says False if it already
        had, so no approved call ever runs twice.
        """
        async for event in self._guarded(self._continue(state, decisions, mark_started)):
            yield event

    @abstractmethod
    def _gen_inner(
        self, query: str, *, history: Sequence[HistoryTurn], extra_parts: Sequence[dict[str, Any]]
    ) -> AsyncIterator[AgentOutput]:
        """The agent type's own steps; ends by delegating to run_loop."""

    async def _guarded(self, events: AsyncIterator[AgentOutput]) -> AsyncIterator[AgentOutput]:
        try:
            async for event in events:
                yield event
        except QuotaExceeded as error:
            yield QuotaFailed(message=error.refusal.sentence, retryable=False, refusal=error.refusal)
        except LLMError as error:
            log.warning("model call failed: %r", error)
            yield Failed(message=error.message, retryable=error.retryable)
        except Exception:
            log.exception("agent run failed")
            yield Failed(message=wording.unexpected_error(), retryable=True)

    @property
    def usage(self) -> Usage:
        """The tokens this run's loop has counted so far (a resumed run's include its paused part's); none
        before its loop starts."""
        return self._state.usage if self._state is not None else Usage()

    @property
    def ran(self) -> tuple[ToolRun, ...]:
        """The approved calls this run started, in order, with their outcome once they returned."""
        return tuple(self._ran.values())

    def progress(self) -> Progress:
        """The turn so far, for a run that failed or was cancelled: once an approved call started,
        it is stored whatever happens next, so nobody is asked to run it again."""
        ran = self.ran
        state = self._state
        if state is None:
            return Progress(turn_messages=[], sources=self.sources.items, ran=ran)
        messages = list(state.messages[state.turn_start :])
        messages.extend(self._result_messages(messages, self._unanswered(messages)))
        return Progress(turn_messages=complete_tool_rounds(messages), sources=self.sources.items, ran=ran)

    def _unanswered(self, messages: list[dict[str, Any]]) -> list[ToolResult]:
        """Results for the calls of the round in progress that have none in `messages` yet: what
        returned so far, else a sentence saying the call stopped while running or never started."""
        calls = next((m["tool_calls"] for m in reversed(messages) if m.get("role") == "assistant" and m.get("tool_calls")), [])
        answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
        returned = {result.call_id: result for result in self._round}
        return [
            returned.get(call["id"])
            or ToolResult(
                call_id=call["id"],
                tool=call["function"]["name"],
                status="error",
                output=wording.tool_stopped_running() if call["id"] in self._ran else wording.tool_not_started(),
                arguments={},
            )
            for call in calls
            if call["id"] not in answered
        ]

    # ----- the model call (the first prompt's building blocks are NewRunSteps') ---------------------

    async def llm_gen(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: Sequence[str] = (),
        response_format: dict[str, Any] | None = None,
        model: ModelInfo | None = None,
    ) -> AsyncIterator[TextPiece | Completion]:
        """One streamed model call; tools only when the model takes them, structured output only when supported."""
        model = model or self.deps.model
        registry = self.deps.executor.registry
        # Only what is available now: a tool offered earlier in the run may have gone with its MCP server.
        tools = [name for name in tools if name in registry]
        tool_specs = registry.openai_tools(tools) if tools and model.supports_tools else None
        max_tokens = self.config.max_tokens if self.config.max_tokens and self.config.max_tokens > 0 else None
        grant = await self._reserve(messages, tool_specs, model, max_tokens)
        if grant is not None and grant.max_output is not None:
            max_tokens = grant.max_output  # never more than the reservation left room for
        completion: Completion | None = None
        received: list[str] = []
        try:
            async for piece in self.deps.llm.stream(
                model=model,
                messages=messages,
                tools=tool_specs or None,
                response_format=response_format if response_format and model.supports_structured_output else None,
                temperature=self.config.temperature,
                max_tokens=max_tokens,
            ):
                if isinstance(piece, Completion):
                    completion = piece
                else:
                    received.append(piece.text)
                yield piece
        finally:
            if grant is not None:
                await asyncio.shield(grant.settle(self._used(grant, completion, received)))

    async def _reserve(self, messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]] | None,
                       model: ModelInfo, max_tokens: int | None) -> Grant | None:
        """This call's reservation (QuotaExceeded when it cannot fit); None when no account pays for this run."""
        quota = self.deps.quota
        if quota is None or not quota.applies(conversation=self.context.conversation, user=self.context.user):
            return None
        counter = self.deps.counter
        prompt = sum(counter.count_message(message) for message in messages)
        if tool_specs:
            prompt += counter.count(json.dumps(tool_specs))
        return await quota.reserve(conversation=self.context.conversation, user=self.context.user,
                                   prompt_tokens=prompt, max_output=max_tokens or model.max_output_tokens)

    def _used(self, grant: Grant, completion: Completion | None, received: list[str]) -> int:
        """The tokens the model reported; for a call that broke off (or reported none), the prompt and what came."""
        if completion is not None and used_tokens(completion.usage) > 0:
            return used_tokens(completion.usage)
        came = "".join(received) + ("".join(call.arguments for call in completion.tool_calls) if completion else "")
        return grant.prompt_tokens + (self.deps.counter.count(came) if came else 0)

    # ----- the loop -----------------------------------------------------------------------------

    async def run_loop(self, state: RunState) -> AsyncIterator[AgentOutput]:
        """Call the model, run tools, repeat until an answer, a pause, or the round limit."""
        self._state = state
        while state.rounds_used < self.config.loop_limit:
            state.rounds_used += 1
            completion: Completion | None = None
            async for piece in self.llm_gen(state.messages, tools=state.offered_tools, response_format=state.response_format):
                if isinstance(piece, TextPiece):
                    state.answer_so_far += piece.text
                    yield AnswerDelta(text=piece.text)
                else:
                    completion = piece
            assert completion is not None
            state.usage = Usage(
                prompt_tokens=state.usage.prompt_tokens + completion.usage.prompt_tokens,
                completion_tokens=state.usage.completion_tokens + completion.usage.completion_tokens,
            )
            if not completion.tool_calls:
                state.messages.append({"role": "assistant", "content": completion.text})
                yield Finished(
                    answer=state.answer_so_far,
                    turn_messages=state.messages[state.turn_start :],
                    sources=self.sources.items,
                    usage=state.usage,
                )
                return
            state.messages.append(_assistant_tool_message(completion))
            pending: list[PendingToolCall] = []
            results: list[ToolResult] = []
            self._round = results
            for call in completion.tool_calls:
                parsed = self.deps.executor.parse(_as_tool_call(call), offered=state.offered_tools)
                triage = self._triage(parsed)
                if isinstance(triage, ToolResult):
                    yield ToolCallFinished(call_id=triage.call_id, tool=triage.tool, status="error", output_preview=_preview(triage.output))
                    results.append(triage)
                elif triage:
                    pending.append(PendingToolCall(call_id=parsed.id, tool=parsed.name, arguments=parsed.call.arguments))
                else:
                    async for event in self._run_tool(parsed, results):
                        yield event
            self._append_results(state, results)
            if pending:
                yield self._pause(state, pending)
                return
        yield Failed(message=wording.loop_limit_reached(self.config.loop_limit), retryable=False)

    def _triage(self, parsed: ParsedCall | ToolResult) -> ToolResult | bool:
        """An error result for a call that cannot run (its arguments, or its approval rule failed), else whether
        it waits: for a person's approval, or for a client's result."""
        if isinstance(parsed, ToolResult):
            return parsed
        if parsed.spec.client_side:
            return True  # a client's tool always waits for its result, whatever an approval rule says
        return self.deps.executor.decide(parsed, self._tool_context())

    async def _continue(
        self, state: RunState, decisions: Mapping[str, Decision], mark_started: MarkStarted
    ) -> AsyncIterator[AgentOutput]:
        self.sources = SourceCollector(state.sources)
        self._state = state
        results: list[ToolResult] = []
        self._round = results
        client_tools = {tool["name"] for tool in state.client_tools}
        for pending in state.pending:
            call = ToolCallRequest(id=pending.call_id, name=pending.tool, arguments=pending.arguments)
            decision = decisions.get(pending.call_id)
            if pending.tool in client_tools:
                # Nothing runs here: the client ran it (or declined to), and its answer is the result.
                result = self._client_result(call, decision)
                results.append(result)
                yield ToolCallFinished(call_id=call.id, tool=call.name, status=result.status, output_preview=_preview(result.output))
                continue
            if decision is None or not decision.approved:
                result = self.deps.executor.rejected(call, decision.comment if decision else None)
                results.append(result)
                yield ToolCallFinished(call_id=call.id, tool=call.name, status="rejected", output_preview=_preview(result.output))
                continue
            parsed = self.deps.executor.parse(call, offered=state.offered_tools)
            if isinstance(parsed, ToolResult):
                results.append(parsed)
                yield ToolCallFinished(call_id=call.id, tool=call.name, status="error", output_preview=_preview(parsed.output))
                continue
            if not await mark_started(call.id):
                result = ToolResult(call_id=call.id, tool=call.name, status="error", output=wording.tool_outcome_unknown(), arguments=parsed.arguments)
                results.append(result)
                yield ToolCallFinished(call_id=call.id, tool=call.name, status="error", output_preview=_preview(result.output))
                continue
            self._ran[call.id] = ToolRun(call_id=call.id, tool=call.name)
            async for event in self._run_tool(parsed, results):
                yield event
            ended = results[-1]
            self._ran[call.id] = ToolRun(call_id=call.id, tool=call.name, status=ended.status, output_preview=_preview(ended.output))
        state.pending = []
        self._append_results(state, results)
        async for event in self.run_loop(state):
            yield event

    async def _run_tool(self, parsed: ParsedCall, results: list[ToolResult]) -> AsyncIterator[Event]:
        yield ToolCallStarted(call_id=parsed.id, tool=parsed.name, arguments=parsed.arguments)
        result = await self.deps.executor.run(parsed, self._tool_context())
        # Outside text (a page, a query's rows, an MCP server's answer) is stored with the turn and the pause.
        result = dataclasses.replace(result, output=storable(result.output))
        results.append(result)
        yield ToolCallFinished(call_id=result.call_id, tool=result.tool, status=result.status, output_preview=_preview(result.output))

    def _client_result(self, call: ToolCallRequest, decision: Decision | None) -> ToolResult:
        """A client-executed call's result as sent, or the declined / missing answer the model reads instead."""
        if decision is None or not decision.approved:
            return self.deps.executor.rejected(call, decision.comment if decision else None)
        if decision.result is None:
            return ToolResult(call_id=call.id, tool=call.name, status="error", output=wording.client_tool_no_result(),
                              arguments={})
        spec = self.deps.executor.registry.get(call.name)
        text = storable(decision.result)
        output = truncate_middle(text, spec.max_output_chars if spec else len(text) or 1)
        return ToolResult(call_id=call.id, tool=call.name, status="ok", output=output, arguments={})

    def _tool_context(self) -> ToolContext:
        return ToolContext(
            user=self.context.user.id,
            user_name=self.context.user.name,
            conversation_id=self.context.conversation_id,
            conversation=self.context.conversation,
            services=self.deps.tool_services,
            retriever=self.deps.retriever,
            sources=self.sources,
            search_exposure=self.search_exposure,
            source_scope=self.config.source_scope,
            channel_tool_rules=self.config.tool_rules,
            retrieval_chunks=self.config.retrieval_chunks,
            # The asker's own words, which tools may treat as vouched for: never the turn's message, which
            # also carries the attached files' text.
            question=self.context.question,
        )

    def _append_results(self, state: RunState, results: list[ToolResult]) -> None:
        """Add tool results in call order, each capped so the next call still fits the context."""
        state.messages.extend(self._result_messages(state.messages, results))
        self._round = []
        state.sources = self.sources.items

    def _result_messages(self, messages: list[dict[str, Any]], results: list[ToolResult]) -> list[dict[str, Any]]:
        """Tool messages for results of the last tool round in `messages`, in call order, each capped."""
        if not results:
            return []
        model = self.deps.model
        budget = plan_budget(context_limit=model.context_limit, system_tokens=0, max_tokens=self.config.max_tokens)
        used = sum(self.deps.counter.count_message(message) for message in messages)
        room = budget.available - used
        cap = max(TOOL_OUTPUT_MIN_TOKENS, min(TOOL_OUTPUT_MAX_TOKENS, room // len(results)))
        calls = next((m.get("tool_calls") for m in reversed(messages) if m.get("role") == "assistant" and m.get("tool_calls")), None)
        order = {call["id"]: index for index, call in enumerate(calls or [])}
        return [
            {"role": "tool", "tool_call_id": result.call_id, "content": self.deps.counter.truncate_middle(result.output, cap)}
            for result in sorted(results, key=lambda r: order.get(r.call_id, len(order)))
        ]

    def _pause(self, state: RunState, pending: list[PendingToolCall]) -> Paused:
        state.pending = pending
        state.sources = self.sources.items
        registry = self.deps.executor.registry
        calls = tuple(
            PendingCall(
                call_id=call.call_id,
                tool=call.tool,
                arguments=_loads_or_raw(call.arguments),
                description=(registry.get(call.tool).description if registry.get(call.tool) else ""),
                client=any(tool.name == call.tool for tool in self.config.client_tools),
            )
            for call in pending
        )
        return Paused(state=state, calls=calls)


def _assistant_tool_message(completion: Completion) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": completion.text or None,
        "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in completion.tool_calls
        ],
    }


def _as_tool_call(call: Any) -> ToolCallRequest:
    return call if isinstance(call, ToolCallRequest) else ToolCallRequest(id=call.id, name=call.name, arguments=call.arguments)


def _loads_or_raw(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return {"raw": arguments}
    return value if isinstance(value, dict) else {"value": value}


def _preview(output: str) -> str:
    return output if len(output) <= PREVIEW_CHARS else output[: PREVIEW_CHARS - 1] + "…"

