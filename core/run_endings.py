"""A run's ending, stored and counted: finished turn, saved pause, question alone, turn so far; the answer line."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, assert_never

import psycopg
from psycopg_pool import PoolTimeout

from core import metrics, wording
from core.agents import AgentOutput, BaseAgent, Finished, Paused
from core.citations import cite
from core.events import ApprovalRequired, Done, Event, Failed, SourceItem, Sources, Stopped, Usage
from core.history import TurnHistory
from core.observe import RunTrace
from core.store.continuations import ContinuationStore, StoredCall
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
    # The sentence the answer opens with when an attached file was left out (core.attachments), else "".
    notice: str = ""


class RunEndings:
    """Stores how each run ended, and says it as the events that end the run."""

    def __init__(self, *, history: TurnHistory, continuations: ContinuationStore, approval_expiry_s: float) -> None:
        self._history = history
        self._continuations = continuations
        self._approval_expiry_s = approval_expiry_s

    async def end(self, plan: RunPlan, output: Finished | Paused | Failed) -> list[Event]:
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
                await self.keep_progress(plan, shown=message)
            return [Failed(message=message, retryable=False)]

    async def end_stopped(self, plan: RunPlan, shown: str, by: str) -> list[Event]:
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

    async def keep_progress(self, plan: RunPlan, *, shown: str | None = None) -> None:
        """Store the turn so far once an approved call started; `shown` is what the user was told."""
        progress = plan.agent.progress()
        if not progress.ran:
            return
        messages = [*progress.turn_messages, *([{"role": "assistant", "content": shown}] if shown else [])]
        try:
            await self._store(plan, messages, sources=progress.sources)
        except (psycopg.Error, PoolTimeout):
            log.exception("could not store turn %s, whose approved calls ran", plan.agent.context.turn_id)

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
        answer = notice_lead(plan.notice) + cited.text if plan.notice else cited.text
        return [*sources, Done(answer=answer, usage=finished.usage)]

    async def _store_failed(self, plan: RunPlan, failed: Failed) -> Failed:
        """The question alone when nothing was approved and run; otherwise the turn so far, and a
        sentence saying what ran (asking again would ask to run it again)."""
        ran = plan.agent.ran
        if not ran:
            await self._store_question(plan)
            return failed
        message = wording.stopped_after_tools(ran, failed.message)
        await self.keep_progress(plan, shown=message)
        return Failed(message=message, retryable=False)

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
        expires = datetime.now(timezone.utc).timestamp() + self._approval_expiry_s
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


def outcome_of(ending: Sequence[Event]) -> str:
    """The answer's outcome for the log line and the metrics, from the events that ended it."""
    if any(isinstance(event, Stopped) for event in ending):
        return "stopped"
    if any(isinstance(event, Failed) for event in ending):
        return "failed"
    return "approval" if any(isinstance(event, ApprovalRequired) for event in ending) else "answered"


def notice_lead(notice: str) -> str:
    return f"{notice}\n\n"


def _cleaned(message: dict[str, Any], sources: Sequence[SourceItem]) -> dict[str, Any]:
    """An assistant message of the turn as stored: without citations that name no source."""
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, str):
        return message
    return {**message, "content": cite(content, sources).text}


async def report_answer(
    plan: RunPlan, trace: RunTrace, outcome: str, usage: Usage | None, *, usage_log: UsageLog | None
) -> None:
    """The answer line, the answer metrics, and the turn's tokens in the usage table (when there is one)."""
    # A run that failed or stopped reports what its loop had counted.
    used = usage if usage is not None else plan.agent.usage
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
    if usage_log is None or not (tokens_in or tokens_out):
        return
    context = plan.agent.context
    try:
        await usage_log.add(TurnUsage(
            turn_id=context.turn_id, platform=context.conversation.platform, workspace=context.conversation.workspace,
            channel=context.conversation.channel, user=context.user.id, model=trace.model,
            prompt_tokens=tokens_in, completion_tokens=tokens_out,
        ))
    except (psycopg.Error, PoolTimeout):
        # The answer is what matters; its tokens are still counted in the metrics and the log line.
        log.warning("could not store the token usage of turn %s", context.turn_id, exc_info=True)


def report_unstarted(platform: str, reason: str) -> None:
    """A run that failed before it started still counts, as a failed answer of no tokens."""
    log.info("answer failed on %s before it started: %s", platform, reason,
             extra={"event": "answer", "platform": platform, "outcome": "failed", "tokens_in": 0, "tokens_out": 0})
    metrics.record_answer(platform=platform, outcome="failed", model="", first_token_s=None, total_s=None,
                          tokens_in=0, tokens_out=0)
