"""The shared run player: every ending leaves the answer final; a lost approval message is withdrawn."""

from __future__ import annotations

from collections.abc import AsyncIterator

from adapters import wording
from adapters.run_player import play_run
from adapters.streaming import MessageStreamer, RateBudget, StreamLimits
from core.events import AnswerDelta, ApprovalRequired, Done, Event, PendingCall, SourceItem, Sources
from tests.adapters.streaming_fakes import FakeClock, MemoryTransport


class RecordingSurface:
    def __init__(self, *, approval_fails: bool = False) -> None:
        self.approval_fails = approval_fails
        self.approvals: list[str] = []
        self.sources: list[tuple[SourceItem, ...]] = []
        self.notices: list[str] = []

    async def show_approval(self, event: ApprovalRequired) -> None:
        if self.approval_fails:
            raise RuntimeError("the platform refused the approval message")
        self.approvals.append(event.continuation_id)

    async def show_sources(self, items: tuple[SourceItem, ...], answer_ids: list[str]) -> None:
        self.sources.append(items)

    async def show_notice(self, text: str) -> None:
        self.notices.append(text)


async def _events(*events: Event) -> AsyncIterator[Event]:
    for event in events:
        yield event


def _streamer(clock: FakeClock, transport: MemoryTransport) -> MessageStreamer:
    budget = RateBudget(capacity=10, refill_per_s=10, clock=clock)
    return MessageStreamer(
        transport, limits=StreamLimits(max_chars=500), edit_budget=budget, post_budget=budget, clock=clock
    )


PAUSE = ApprovalRequired(
    continuation_id="c-1",
    calls=(PendingCall(call_id="a", tool="deploy", arguments={"env": "prod"}),),
    requested_by="U1",
    expires_at=0.0,
)


async def test_a_lost_approval_message_is_withdrawn_and_the_user_told() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    surface = RecordingSurface(approval_fails=True)
    withdrawn: list[str] = []

    async def withdraw(continuation_id: str) -> bool:
        withdrawn.append(continuation_id)
        return True

    streamer = _streamer(clock, transport)
    await clock.run(play_run(_events(AnswerDelta(text="Let me deploy."), PAUSE), streamer, surface, withdraw_approval=withdraw))
    assert withdrawn == ["c-1"]
    assert surface.notices == [wording.approval_not_shown()]
    assert transport.final_texts() == ["Let me deploy."]


async def test_done_shows_only_this_streams_text_and_then_the_sources() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    surface = RecordingSurface()
    item = SourceItem(title="Runbook", uri="https://wiki/runbook", text="…")

    async def withdraw(continuation_id: str) -> bool:
        raise AssertionError("nothing to withdraw")

    events = _events(AnswerDelta(text="Deployed [1]."), Sources(items=(item,)), Done(answer="Let me deploy. Deployed [1]."))
    await clock.run(play_run(events, _streamer(clock, transport), surface, withdraw_approval=withdraw))
    assert transport.final_texts() == ["Deployed [1]."]  # a resumed run's message holds what came after the pause
    assert surface.sources == [(item,)]
