"""The shared answer runner: every ending leaves the answer final; a lost approval message is withdrawn;
crash repair keeps the text shown; a click's result is shown the same way on every platform."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from adapters import wording
from adapters.answers import AnswerPlace, AnswerRunner, Pacing, repaired_text
from adapters.streaming import RateBudget, RateLimited, StreamLimits, TransientSendError
from adapters.streaming.transport import PermanentSendError
from core.approvals import ApprovalView, CallView, ClickResult
from core.citations import Citation
from core.events import AnswerDelta, ApprovalRequired, Done, Event, Failed, PendingCall, SourceItem, Sources
from core.ports import FinalPart, LiveMessage, PendingFinal
from tests.adapters.streaming_fakes import FakeClock, MemoryTransport


class MemoryLive:
    """An in-memory LiveAnswerLog."""

    def __init__(self, rows: list[LiveMessage] | None = None) -> None:
        self.rows: list[LiveMessage] = list(rows or [])
        self.claimed: list[LiveMessage] = []
        self.added: list[str] = []

    async def add(self, message: LiveMessage) -> None:
        self.rows.append(message)
        self.added.append(message.message_id)

    async def remove(self, *, platform: str, channel: str, message_id: str) -> None:
        self.rows = [r for r in self.rows if not (r.platform == platform and r.channel == channel and r.message_id == message_id)]

    async def take_all(self, platform: str) -> list[LiveMessage]:
        """Claimed records stay until removed or released (core.store.live_messages)."""
        taken = [r for r in self.rows if r.platform == platform and r not in self.claimed]
        self.claimed.extend(taken)
        return taken

    async def release(self, message: LiveMessage) -> None:
        self.claimed.remove(message)


class Approvals:
    """Records what the runner asks of the approval service."""

    def __init__(self, view: ApprovalView | None = None) -> None:
        self.withdrawn: list[str] = []
        self.remembered: list[tuple[str, dict[str, Any]]] = []
        self.current = view

    async def remember_message(self, continuation_id: str, ref: dict[str, Any]) -> None:
        self.remembered.append((continuation_id, ref))

    async def withdraw(self, continuation_id: str) -> bool:
        self.withdrawn.append(continuation_id)
        return True

    async def view(self, continuation_id: str) -> ApprovalView | None:
        return self.current


class RecordingSurface:
    def __init__(self, clock: FakeClock, *, approval_fails: bool = False) -> None:
        self.transport = MemoryTransport(clock=clock)
        budget = RateBudget(capacity=10, refill_per_s=10, clock=clock)
        self.place = AnswerPlace(platform="test", workspace="W", channel="C")
        self.pacing = Pacing(limits=StreamLimits(max_chars=500), edit_budget=budget, post_budget=budget, clock=clock)
        self.approval_fails = approval_fails
        self.calls: list[str] = []
        self.approvals: list[ApprovalView] = []
        self.sources: list[tuple[Citation, ...]] = []
        self.notices: list[str] = []

    async def post(self, text: str, *, key: str | None = None) -> str:
        return await self.transport.post(text, key=key)

    async def edit(self, message_id: str, text: str) -> None:
        await self.transport.edit(message_id, text)

    async def show_working(self) -> None:
        self.calls.append("working")

    async def show_approval(self, view: ApprovalView) -> dict[str, Any]:
        if self.approval_fails:
            raise RuntimeError("the platform refused the approval message")
        self.approvals.append(view)
        return {"message": "m-approval"}

    async def show_sources(self, citations: tuple[Citation, ...], answer_ids: list[str]) -> None:
        self.sources.append(citations)

    async def show_notice(self, text: str) -> None:
        self.notices.append(text)


async def _events(*events: Event) -> AsyncIterator[Event]:
    for event in events:
        yield event


PAUSE = ApprovalRequired(
    continuation_id="c-1",
    calls=(PendingCall(call_id="a", tool="deploy", arguments={"env": "prod"}),),
    requested_by="U1",
    expires_at=0.0,
)


async def test_a_lost_approval_message_is_withdrawn_and_the_user_told() -> None:
    clock = FakeClock()
    surface = RecordingSurface(clock, approval_fails=True)
    approvals = Approvals()
    runner = AnswerRunner(platform="test", approvals=approvals, live=MemoryLive())
    await clock.run(runner.play(_events(AnswerDelta(text="Let me deploy."), PAUSE), surface))
    assert approvals.withdrawn == ["c-1"] and approvals.remembered == []
    assert surface.notices == [wording.approval_not_shown()]
    assert surface.transport.final_texts() == ["Let me deploy."]


async def test_a_posted_approval_is_remembered_for_its_expiry_edit() -> None:
    clock = FakeClock()
    surface = RecordingSurface(clock)
    approvals = Approvals()
    live = MemoryLive()
    runner = AnswerRunner(platform="test", approvals=approvals, live=live)
    await clock.run(runner.play(_events(PAUSE), surface))
    assert [view.calls[0].arguments for view in surface.approvals] == [{"env": "prod"}]
    assert approvals.remembered == [("c-1", {"message": "m-approval"})]
    assert surface.transport.final_texts() == [wording.waiting_for_approval()]
    assert live.rows == [] and live.added, "the answer message was recorded while live and forgotten once final"


async def test_done_shows_only_this_streams_text_and_then_the_sources() -> None:
    clock = FakeClock()
    surface = RecordingSurface(clock)
    item = SourceItem(title="Runbook", uri="https://wiki/runbook", text="…")
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive())
    events = _events(AnswerDelta(text="Deployed [1]."), Sources(items=(item,)), Done(answer="Let me deploy. Deployed [1]."))
    await clock.run(runner.play(events, surface))
    assert surface.calls == ["working"]
    assert surface.transport.final_texts() == ["Deployed [1]."]  # a resumed run's message holds what came after the pause
    assert surface.sources == [(Citation(number=1, item=item),)]


async def test_the_final_text_drops_citations_of_no_source_and_the_reply_lists_only_those_cited() -> None:
    clock = FakeClock()
    surface = RecordingSurface(clock)
    items = tuple(SourceItem(title=f"Doc {n}", uri=f"https://wiki/{n}", text="…") for n in range(1, 7))
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive())
    streamed = ["See [2], [9", "] and [1][4]. In code: `x[9]`."]
    events = _events(*(AnswerDelta(text=t) for t in streamed), Sources(items=items),
                     Done(answer="See [2] and [1][4]. In code: `x[9]`."))
    await clock.run(runner.play(events, surface))
    assert surface.transport.final_texts() == ["See [2] and [1][4]. In code: `x[9]`."]
    [cited] = surface.sources
    assert [(c.number, c.item.title) for c in cited] == [(1, "Doc 1"), (2, "Doc 2"), (4, "Doc 4")]


async def test_an_answer_that_cites_nothing_gets_no_sources_reply() -> None:
    clock = FakeClock()
    surface = RecordingSurface(clock)
    item = SourceItem(title="Runbook", uri="https://wiki/runbook", text="…")
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive())
    await clock.run(runner.play(_events(AnswerDelta(text="No idea [3]."), Sources(items=(item,)), Done(answer="No idea.")), surface))
    assert surface.transport.final_texts() == ["No idea."]
    assert surface.sources == []


async def test_a_failure_after_text_keeps_the_text_and_adds_the_sentence_a_failure_before_replaces_the_placeholder() -> None:
    clock = FakeClock()
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive())
    written = RecordingSurface(clock)
    await clock.run(runner.play(_events(AnswerDelta(text="The whole answer."), Failed(message="Not saved.")), written))
    [final] = written.transport.final_texts()
    assert final.startswith("The whole answer.") and final.endswith(wording.failed("Not saved."))
    silent = RecordingSurface(clock)
    await clock.run(runner.play(_events(Failed(message="Model down.")), silent))
    assert silent.transport.final_texts() == [wording.failed("Model down.")]


def test_a_repaired_answer_keeps_what_was_shown_and_adds_the_note() -> None:
    note = wording.interrupted()
    assert repaired_text("Step one ▌", note, max_chars=2000) == f"Step one\n\n{note}"
    assert repaired_text("```py\nx = 1 ▌", note, max_chars=2000) == f"```py\nx = 1\n```\n\n{note}"
    assert repaired_text("_thinking…_ ▌", note, max_chars=2000) == note
    long = repaired_text("y" * 3000, note, max_chars=2000)
    assert len(long) <= 2000 and long.endswith(note)


class Shown:
    max_chars = 2000

    def __init__(self, texts: dict[str, str | None]) -> None:
        self.texts = texts
        self.written: dict[str, str] = {}

    def render(self, markdown: str) -> str:
        return markdown

    async def read_shown(self, message: LiveMessage) -> str | None:
        return self.texts[message.message_id]

    async def replace_shown(self, message: LiveMessage, text: str) -> None:
        self.written[message.message_id] = text


async def test_repair_at_start_keeps_the_shown_text_of_this_platforms_leftovers_only() -> None:
    mine = LiveMessage(platform="test", workspace="W", channel="C", message_id="1")
    gone = LiveMessage(platform="test", workspace="W", channel="C", message_id="2")
    other = LiveMessage(platform="other", workspace="W", channel="C", message_id="3")
    live = MemoryLive([mine, gone, other])
    shown = Shown({"1": "Half an answer ▌", "2": None})
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=live)
    assert await runner.repair_leftovers(shown) == 2
    assert shown.written == {"1": f"Half an answer\n\n{wording.interrupted()}", "2": wording.interrupted()}
    assert live.rows == [other]


class Reply:
    def __init__(self, *, redraw_fails: bool = False) -> None:
        self.redraw_fails = redraw_fails
        self.redrawn: list[ApprovalView] = []
        self.told: list[str] = []

    async def redraw(self, view: ApprovalView) -> None:
        if self.redraw_fails:
            raise RuntimeError("message deleted")
        self.redrawn.append(view)

    async def tell(self, text: str) -> None:
        self.told.append(text)


VIEW = ApprovalView(
    continuation_id="c-1", requested_by="U1", expires_at=0.0,
    calls=(CallView(call_id="a", tool="deploy", arguments={"env": "prod"}),),
)


async def test_a_click_result_is_redrawn_told_and_its_resumed_run_played() -> None:
    clock = FakeClock()
    surface = RecordingSurface(clock)
    runner = AnswerRunner(platform="test", approvals=Approvals(VIEW), live=MemoryLive())
    refused = Reply()
    await runner.settle_click(ClickResult(outcome="refused", message="Only U1 can decide."), refused, surface, message_key="m")
    assert refused.told == ["Only U1 can decide."] and refused.redrawn == []

    ready = Reply(redraw_fails=True)
    result = ClickResult(outcome="ready", message="", view=VIEW, claimed=True, events=_events(Done(answer="Deployed.")))
    await clock.run(runner.settle_click(result, ready, surface, message_key="m"))
    assert ready.told == [], "a failed redraw of a click that resumed tells nobody the click was lost"
    assert surface.transport.final_texts() == ["Deployed."]


class MemoryOutbox:
    """An in-memory FinalOutbox; `owner` '' means anyone may take the final."""

    def __init__(self) -> None:
        self.finals: dict[str, tuple[PendingFinal, str]] = {}
        self.attempted: dict[str, dict[int, float]] = {}
        self.released: list[tuple[str, bool]] = []

    async def keep(self, final: PendingFinal, *, attempted: dict[int, float] | None = None) -> None:
        self.finals[final.answer_id] = (final, "me")
        self.attempted.setdefault(final.answer_id, {}).update(attempted or {})

    async def delivered(self, answer_id: str) -> None:
        self.finals.pop(answer_id, None)

    async def release(self, answer_id: str, *, backoff: bool = False) -> None:
        # As the store: a final handed back with a backoff is not taken again before it (here: until released again).
        if answer_id in self.finals:
            self.finals[answer_id] = (self.finals[answer_id][0], "backing-off" if backoff else "")
        self.released.append((answer_id, backoff))

    async def attempting(self, answer_id: str, index: int, *, at: float | None = None) -> bool:
        if answer_id not in self.finals or self.finals[answer_id][1] not in ("me", "taker"):
            return False
        self.attempted.setdefault(answer_id, {})[index] = at if at is not None else 0.0
        return True

    async def attempts(self, answer_id: str) -> dict[int, float]:
        return dict(self.attempted.get(answer_id, {}))

    async def expire(self, platform: str, *, max_age_s: float) -> list[PendingFinal]:
        return []

    async def take(self, platform: str, *, limit: int | None = None) -> list[PendingFinal]:
        free = [final for final, owner in self.finals.values() if owner == "" and final.platform == platform][:limit]
        for final in free:
            self.finals[final.answer_id] = (final, "taker")
        return free


class PartDelivery:
    """A FinalDelivery over a MemoryTransport: posts each part once, however often it is asked."""

    def __init__(self, transport: MemoryTransport) -> None:
        self.transport = transport
        self.posted: dict[tuple[str, int], str] = {}

    async def post_part(self, final: PendingFinal, index: int, text: str) -> str:
        key = (final.answer_id, index)
        if key not in self.posted:
            self.posted[key] = await self.transport.post(text)
        else:
            await self.transport.edit(self.posted[key], text)
        return self.posted[key]

    async def edit_part(self, final: PendingFinal, message_id: str, text: str) -> None:
        await self.transport.edit(message_id, text)


async def test_a_final_still_rate_limited_at_shutdown_is_handed_over_whole_not_cut_short() -> None:
    clock = FakeClock()
    surface = RecordingSurface(clock)
    outbox = MemoryOutbox()
    live = MemoryLive()
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=live, outbox=outbox)

    async def answer() -> AsyncIterator[Event]:
        yield AnswerDelta(text="The whole answer, ")
        await clock.sleep(2)
        yield AnswerDelta(text="every word of it.")
        surface.transport.faults.extend(RateLimited(3600) for _ in range(3))  # the platform says "much later"
        yield Done(answer="The whole answer, every word of it.")

    async def scenario() -> None:
        playing = asyncio.ensure_future(runner.play(answer(), surface))
        await clock.sleep(5)
        assert outbox.finals, "the final waits in the outbox"
        await runner.interrupt_all()  # shutdown
        await asyncio.gather(playing, return_exceptions=True)

    await clock.run(scenario())
    [(kept, owner)] = outbox.finals.values()
    assert owner == "" and [part.text for part in kept.parts] == ["The whole answer, every word of it."]
    assert all(wording.interrupted() not in text for text in surface.transport.texts.values())
    assert live.rows == [], "the outbox finishes those messages, so crash repair leaves them alone"

    # The next process (or this one after a restart) delivers it, editing the message already shown.
    surface.transport.faults.clear()
    later = AnswerRunner(platform="test", approvals=Approvals(), live=live, outbox=outbox)
    delivery = PartDelivery(surface.transport)
    assert await clock.run(later.deliver_pending(delivery)) == 1
    assert surface.transport.final_texts() == ["The whole answer, every word of it."] and outbox.finals == {}


async def test_a_streamer_whose_kept_final_another_process_took_posts_nothing_after_its_429_pause() -> None:
    clock = FakeClock()
    surface = RecordingSurface(clock)
    outbox = MemoryOutbox()
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive(), outbox=outbox)
    surface.transport.faults.append(RateLimited(30))  # the final's post: "in 30 s"

    async def scenario() -> None:
        playing = asyncio.ensure_future(runner.play(_events(Done(answer="The final answer.")), surface))
        await clock.sleep(5)
        [(kept, owner)] = outbox.finals.values()
        assert owner == "me", "kept while it waits"
        # This process's heartbeat went stale (a database failover): another process took the final.
        outbox.finals[kept.answer_id] = (kept, "process-B")
        await playing

    await clock.run(scenario())
    assert surface.transport.texts == {}, "the final is the other process's to post now"


async def test_a_final_handed_over_at_shutdown_is_never_posted_by_the_old_streamer_too() -> None:
    clock = FakeClock()
    surface = RecordingSurface(clock)
    outbox = MemoryOutbox()
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive(), outbox=outbox)
    surface.transport.faults.append(RateLimited(30))

    async def scenario() -> None:
        playing = asyncio.ensure_future(runner.play(_events(Done(answer="Posted exactly once.")), surface))
        await clock.sleep(5)
        await runner.interrupt_all()  # shutdown: the waiting final is handed over
        await asyncio.gather(playing, return_exceptions=True)
        later = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive(), outbox=outbox)
        assert await later.deliver_pending(PartDelivery(surface.transport)) == 1
        await clock.sleep(120)  # well past the 429's pause

    await clock.run(scenario())
    assert surface.transport.final_texts() == ["Posted exactly once."]


async def test_a_kept_final_is_given_up_only_for_a_permanent_error() -> None:
    class Failing(PartDelivery):
        def __init__(self, error: BaseException) -> None:
            super().__init__(MemoryTransport(clock=FakeClock()))
            self.error = error

        async def post_part(self, final: PendingFinal, index: int, text: str) -> str:
            raise self.error

    outbox = MemoryOutbox()
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive(), outbox=outbox)
    final = PendingFinal(answer_id="a-1", platform="test", workspace="W", channel="C", thread="",
                         parts=(FinalPart(text="kept"),))
    for surprise in (RuntimeError("nobody documented this"), TransientSendError("502"), RateLimited(5)):
        await outbox.keep(final)
        await outbox.release("a-1")
        assert await runner.deliver_pending(Failing(surprise)) == 0
        assert "a-1" in outbox.finals and outbox.released[-1] == ("a-1", True), f"{surprise!r} is 'later'"
    await outbox.release("a-1")  # its backoff has passed
    assert await runner.deliver_pending(Failing(PermanentSendError("gone", code="channel_not_found"))) == 0
    assert "a-1" not in outbox.finals


async def test_a_repair_that_fails_for_now_hands_its_record_back_for_the_next_round() -> None:
    message = LiveMessage(platform="test", workspace="W", channel="C", message_id="1")
    live = MemoryLive([message])

    class Down(Shown):
        async def read_shown(self, message: LiveMessage) -> str | None:
            raise TransientSendError("Slack answered 503")

    runner = AnswerRunner(platform="test", approvals=Approvals(), live=live)
    assert await runner.repair_leftovers(Down({"1": "half ▌"})) == 0
    assert live.rows == [message] and live.claimed == [], "kept, and free for the next round"
    shown = Shown({"1": "half ▌"})
    assert await runner.repair_leftovers(shown) == 1
    assert live.rows == [] and shown.written == {"1": f"half\n\n{wording.interrupted()}"}


async def test_a_database_error_recording_a_posted_part_keeps_the_rest_and_the_part_is_found_not_reposted() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)

    class Finder(PartDelivery):
        """Posts every time it is asked (as a platform would) and finds what it posted by part."""

        async def post_part(self, final: PendingFinal, index: int, text: str) -> str:
            self.posted[(final.answer_id, index)] = await self.transport.post(text)
            return self.posted[(final.answer_id, index)]

        async def find_part(self, final: PendingFinal, index: int, *, since: float) -> str | None:
            self.looked_up.append(index)
            return self.posted.get((final.answer_id, index))

    class Flaky(MemoryOutbox):
        failures = 1

        async def keep(self, final: PendingFinal, *, attempted: dict[int, float] | None = None) -> None:
            if any(part.message_id for part in final.parts) and self.failures:
                self.failures -= 1
                raise ConnectionError("the database went away")
            await super().keep(final, attempted=attempted)

    outbox = Flaky()
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive(), outbox=outbox)
    final = PendingFinal(answer_id="a-2", platform="test", workspace="W", channel="C", thread="",
                         parts=(FinalPart(text="part one"), FinalPart(text="part two")))
    await outbox.keep(final)
    await outbox.release("a-2")
    delivery = Finder(transport)
    delivery.looked_up = []  # type: ignore[attr-defined]
    assert await clock.run(runner.deliver_pending(delivery, finder=delivery)) == 0
    assert "a-2" in outbox.finals, "the final (both parts) is kept"
    await outbox.release("a-2")  # its backoff has passed
    assert await clock.run(runner.deliver_pending(delivery, finder=delivery)) == 1
    assert transport.final_texts() == ["part one", "part two"], "part one found, not posted twice"
    assert delivery.looked_up == [0]  # type: ignore[attr-defined]


async def test_a_final_meeting_errors_nobody_documented_is_kept_and_delivered_not_given_up() -> None:
    clock = FakeClock()
    surface = RecordingSurface(clock)
    outbox = MemoryOutbox()
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive(), outbox=outbox)
    surface.transport.faults.extend(RuntimeError("an error no platform documents") for _ in range(12))
    await clock.run(runner.play(_events(Done(answer="Arrives in the end.")), surface))
    assert surface.transport.final_texts() == ["Arrives in the end."] and outbox.finals == {}


async def test_an_answer_that_waited_for_its_turn_keeps_the_age_of_its_question_in_the_budget_queues() -> None:
    # Calls are served by their answer's age (adapters/streaming/fair_queue.py): a question taken at t=0 that waited
    # for a slot until t=40 must queue its posts from t=0, ahead of questions that came meanwhile.
    clock = FakeClock()
    surface = RecordingSurface(clock)
    asked_since: list[float] = []
    budget = surface.pacing.post_budget
    post = surface.transport.post

    async def post_noting_its_place(text: str, *, key: str | None = None) -> str:
        asked_since.append(budget.place())
        return await post(text, key=key)

    surface.transport.post = post_noting_its_place  # type: ignore[method-assign]
    taken_at = clock.now()
    surface.pacing = Pacing(limits=surface.pacing.limits, edit_budget=budget, post_budget=budget, clock=clock,
                            since=taken_at)
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive())

    async def played_after_waiting() -> None:
        await clock.sleep(40.0)
        await runner.play(_events(AnswerDelta(text="Done."), Done(answer="Done.")), surface)

    await clock.run(played_after_waiting())
    assert clock.now() >= 40.0
    assert asked_since and set(asked_since) == {taken_at}
