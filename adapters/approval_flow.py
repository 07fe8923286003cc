"""One click flow for every platform: record the decision, show it, and resume once all are decided."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from core import wording
from core.engine import DecisionOutcome, Engine
from core.events import Event, Failed
from core.requests import Actor
from core.store.continuations import ContinuationRow

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class ClickReplies:
    """How a platform answers a click: edit the approval message, tell the clicker, stream a resumed run."""

    show: Callable[[ContinuationRow], Awaitable[None]]
    tell: Callable[[str], Awaitable[None]]
    stream: Callable[[AsyncIterator[Event]], Awaitable[None]]
    refusal: Callable[[DecisionOutcome], str] = lambda outcome: outcome.message


async def handle_click(
    engine: Engine,
    *,
    continuation_id: str,
    call_id: str | None,
    approved: bool,
    actor: Actor,
    replies: ClickReplies,
) -> DecisionOutcome:
    """Decide through the engine (the policy is checked on every click), then show, resume or refuse."""
    outcome = await engine.decide(continuation_id, call_id=call_id, approved=approved, actor=actor)
    if outcome.status in ("recorded", "ready"):
        if outcome.continuation is not None:
            try:
                await replies.show(outcome.continuation)
            except Exception:
                # The decision is recorded: a message that cannot be edited must not stop the run
                # from resuming, nor tell the clicker that the click was lost.
                log.exception("could not show the decisions on %s", continuation_id)
                if outcome.status == "recorded" and outcome.message:
                    await replies.tell(outcome.message)
        if outcome.status == "ready":
            await resume_into(engine, continuation_id=continuation_id, actor=actor, replies=replies)
        return outcome
    await replies.tell(replies.refusal(outcome) or wording.approval_not_found())
    return outcome


async def resume_into(engine: Engine, *, continuation_id: str, actor: Actor, replies: ClickReplies) -> None:
    """Resume the run; a click that lost the claim is told privately, the winner's run is streamed."""
    events = engine.resume(continuation_id, actor=actor)
    first = await anext(events, None)
    if first is None:
        return
    if isinstance(first, Failed):
        # Another click (here or in another instance) claimed the run first.
        await events.aclose()  # type: ignore[attr-defined]
        await replies.tell(first.message)
        return
    await replies.stream(prepend(first, events))


async def prepend(first: Event, rest: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """The event already read, then the rest of the stream."""
    yield first
    try:
        async for event in rest:
            yield event
    finally:
        await rest.aclose()  # type: ignore[attr-defined]
