"""The shared answer runner: plays engine runs into a platform surface, tracks answers in flight, interrupts them at
shutdown, and settles approval clicks; repair and the outbox go through it (the protocols: answer_protocols.py)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from adapters import wording
from adapters.answer_play import OUTBOX_DELIVERED_RETRY_S, PlayedAnswer
from adapters.answer_protocols import (
    AnswerControls,
    AnswerPlace,
    ApprovalMessages,
    ClickReply,
    FinalDelivery,
    Pacing,
    PartFinder,
    PostFinder,
    ShownMessages,
    Surface,
)
from adapters.answer_repair import CURSOR_CHAR, LeftoverRepair, repaired_text
from adapters.answer_slots import ANSWERS_IN_FLIGHT_MAX, AnswerSlots
from adapters.kept_finals import FINALS_PER_CLAIM, OUTBOX_MAX_AGE_S, KeptFinals
from adapters.live_records import (
    INTENT_HEAD_CHARS,
    INTENT_HEAD_MIN_CHARS,
    INTENT_MARK,
    LIVE_WRITE_RETRY_S,
    LiveRecords,
    PostIntent,
    intent_id,
    post_intent_of,
)
from core import observe
from core.approvals import ClickResult
from core.events import Event
from core.ports import FinalOutbox, LiveAnswerLog

# The names platforms and tests import from here; each is defined in the module of its job.
__all__ = [
    "ANSWERS_IN_FLIGHT_MAX", "CURSOR_CHAR", "FINALS_PER_CLAIM", "INTENT_HEAD_CHARS", "INTENT_HEAD_MIN_CHARS",
    "INTENT_MARK", "INTERRUPT_WAIT_S", "LIVE_WRITE_RETRY_S", "OUTBOX_DELIVERED_RETRY_S", "OUTBOX_MAX_AGE_S",
    "AnswerControls", "AnswerPlace", "AnswerRunner", "ApprovalMessages", "ClickReply", "FinalDelivery", "Pacing",
    "PartFinder", "PostFinder", "PostIntent", "ShownMessages", "Surface", "intent_id", "post_intent_of",
    "repaired_text",
]

log = logging.getLogger(__name__)

INTERRUPT_WAIT_S = 5.0


class AnswerRunner:
    """One per platform adapter; the same behaviour on every platform."""

    def __init__(
        self, *, platform: str, approvals: ApprovalMessages, live: LiveAnswerLog, outbox: FinalOutbox | None = None,
        outbox_max_age_s: float = OUTBOX_MAX_AGE_S, in_flight_max: int = ANSWERS_IN_FLIGHT_MAX,
    ) -> None:
        self.platform = platform
        self._slots = AnswerSlots(in_flight_max)
        self._queued: set[asyncio.Task[Any]] = set()  # plays waiting for a slot (told, not cut, at a stop)
        self._turns: set[asyncio.Task[Any]] = set()  # submitted answers' own tasks, playing or telling
        self._approvals = approvals
        self._records = LiveRecords(live, platform=platform)
        self._outbox = outbox
        self._repair = LeftoverRepair(self._records, platform=platform)
        self._finals = (
            KeptFinals(outbox, self._records, platform=platform, max_age_s=outbox_max_age_s)
            if outbox is not None else None
        )
        self._answers: set[PlayedAnswer] = set()
        self._redraw_locks: dict[str, asyncio.Lock] = {}

    @property
    def inflight(self) -> int:
        return len(self._answers)

    @property
    def queued(self) -> int:
        """Answers waiting for a slot (ANSWERS_IN_FLIGHT_MAX are played at once)."""
        return self._slots.queued

    async def play(self, events: AsyncIterator[Event], surface: Surface) -> None:
        """Shows a run's events until it ends, in the caller's task; the answer message always ends in a final state."""
        task = asyncio.current_task()
        if task is not None:
            self._queued.add(task)
        try:
            admitted = await self._slots.take()
        finally:
            self._queued.discard(task)  # type: ignore[arg-type]
        await self._take_turn(admitted, events, surface)

    def submit(
        self, events: AsyncIterator[Event], surface: Surface, *, then: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Plays the answer in a task of its own, now or once a slot frees (ANSWERS_IN_FLIGHT_MAX), and `then` after
        it, however it ends. The caller returns at once: a waiting answer holds its run, its surface and a future —
        not its caller's stack (a platform handler's chain of ~80 objects, walked by every full collection)."""
        context = contextvars.copy_context()
        turn = self._slots.reserve()

        def start(turn: asyncio.Future[bool]) -> None:
            if turn.cancelled():
                return  # the runner was closed without a word (a bare close): nothing shown, nothing to end
            task = asyncio.get_running_loop().create_task(self._turn_then(turn.result(), events, surface, then),
                                                          context=context)
            self._turns.add(task)
            task.add_done_callback(self._turns.discard)

        turn.add_done_callback(start)

    async def _turn_then(
        self, admitted: bool, events: AsyncIterator[Event], surface: Surface, then: Callable[[], Awaitable[None]] | None
    ) -> None:
        try:
            await self._take_turn(admitted, events, surface)
        finally:
            if then is not None:
                try:
                    await asyncio.shield(then())
                except Exception:
                    log.exception("an answer's last step failed in %s", surface.place.channel)

    async def _take_turn(self, admitted: bool, events: AsyncIterator[Event], surface: Surface) -> None:
        """The answer id is the run id of every log line of the answer: bound here, before the streamer's
        editor task starts (it inherits the binding; the engine names the conversation on it)."""
        if not admitted:
            # The process stopped before this answer's turn: nothing was shown, so the asker is told.
            try:
                await surface.show_notice(wording.shutting_down())
            except Exception:
                log.exception("could not tell a waiting question in %s that the bot is restarting", surface.place.channel)
            return
        answer_id = uuid.uuid4().hex
        try:
            with observe.run_scope(run_id=answer_id, platform=self.platform):
                await self._play_answer(events, surface, answer_id)
        finally:
            self._slots.release()

    async def _play_answer(self, events: AsyncIterator[Event], surface: Surface, answer_id: str) -> None:
        await surface.show_working()
        answer = PlayedAnswer(events, surface, answer_id=answer_id, records=self._records, outbox=self._outbox)
        self._answers.add(answer)
        ended = False
        try:
            ended = await answer.play(self._approvals)
        finally:
            self._answers.discard(answer)
            if ended or answer.interrupted:
                await asyncio.shield(self._records.forget(surface.place, answer.streamer.message_ids))

    async def interrupt_all(self) -> None:
        """Stops every answer still streaming and ends it with the text shown so far plus a note; answers still
        waiting for their turn are told the bot is restarting."""
        waiting = list(self._queued)
        self._slots.close()
        await asyncio.sleep(0)  # submitted answers still waiting start their "restarting" turns now
        waiting += [turn for turn in self._turns if not any(turn is answer.task for answer in self._answers)]
        answers = list(self._answers)
        for answer in answers:
            # An answer whose whole final text waits in the outbox is not cut short: it is handed over.
            answer.handed_over = answer.pending is not None
            answer.interrupted = not answer.handed_over
            if answer.task is not None and answer.task is not asyncio.current_task():
                answer.task.cancel()
        tasks = [answer.task for answer in answers if answer.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=INTERRUPT_WAIT_S)
        endings = [
            asyncio.ensure_future(answer.streamer.interrupt(wording.interrupted()))
            for answer in answers if not answer.handed_over
        ]
        if endings:
            # Bounded: a platform that keeps refusing must not hold the shutdown past its grace. An
            # ending not delivered in time leaves its live record, so the next start repairs it.
            _, late = await asyncio.wait(endings, timeout=INTERRUPT_WAIT_S)
            for ending in late:
                ending.cancel()
            if late:
                log.warning("%d interrupted notes not delivered in time; the next start repairs them", len(late))
        if waiting:
            _, untold = await asyncio.wait(waiting, timeout=INTERRUPT_WAIT_S)
            if untold:
                log.warning("%d waiting questions not told of the restart in time", len(untold))

    async def drop_workspace(self, workspace: str) -> int:
        """The bot left a workspace (a guild removed it, a team uninstalled it): its answers in flight stop now with
        nothing more shown there (the platform would refuse it); returns how many. A final one of them kept goes back
        to the outbox, for the caller to drop with the rest of the workspace's pending work (forget_team)."""
        answers = [answer for answer in self._answers if answer.workspace == workspace]
        for answer in answers:
            answer.interrupted = True  # its records are forgotten as it ends: nothing is left to repair
            if answer.task is not None and answer.task is not asyncio.current_task():
                answer.task.cancel()
        tasks = [answer.task for answer in answers if answer.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=INTERRUPT_WAIT_S)
        return len(answers)

    def cancel_all(self) -> list[asyncio.Task[Any]]:
        """Cancels every streaming task without touching the platform (their records stay for the next start)."""
        self._slots.abandon()
        tasks = [answer.task for answer in self._answers if answer.task is not None and not answer.task.done()]
        for task in tasks:
            task.cancel()
        return tasks

    async def repair_leftovers(self, shown: ShownMessages) -> int:
        """At start and every round: every answer a dead process left streaming keeps the text it showed, plus the
        interrupted note on its last message (adapters/answer_repair.py)."""
        return await self._repair.repair_leftovers(shown)

    async def deliver_pending(self, delivery: FinalDelivery, *, finder: PartFinder | None = None) -> int:
        """Delivers the finals nobody else is delivering (their process stopped or died, or was told "later");
        returns how many arrived (adapters/kept_finals.py)."""
        if self._finals is None:
            return 0
        return await self._finals.deliver_pending(delivery, finder=finder)

    async def settle_click(self, result: ClickResult, reply: ClickReply, surface: Surface, *, message_key: str) -> None:
        """Shows a click's result: the approval message redrawn, a private note when there is one to give,
        and the resumed run when this click claimed it."""
        if result.outcome in ("recorded", "ready") and result.view is not None:
            try:
                await self._redraw(result.view.continuation_id, reply, message_key)
            except Exception:
                # The decision is recorded: a message that cannot be edited must not stop the run
                # from resuming, nor tell the clicker that the click was lost.
                log.exception("could not redraw approval %s", result.view.continuation_id)
                if result.outcome == "recorded" and result.message:
                    await reply.tell(result.message)
        elif result.message:
            await reply.tell(result.message)
        if result.events is not None:
            await self.play(result.events, surface)

    async def _redraw(self, continuation_id: str, reply: ClickReply, message_key: str) -> None:
        # Edits of one message are serialised and read the row inside the lock, so the last edit
        # shows every decision recorded so far, however the clicks raced.
        lock = self._redraw_locks.setdefault(message_key, asyncio.Lock())
        try:
            async with lock:
                view = await self._approvals.view(continuation_id)
                if view is not None:
                    await reply.redraw(view)
        finally:
            if not lock.locked() and self._redraw_locks.get(message_key) is lock:
                del self._redraw_locks[message_key]
