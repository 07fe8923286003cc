"""The shared answer runner: plays engine runs into a platform surface, tracks answers in flight,
interrupts them at shutdown, repairs the ones a crash left, and settles approval clicks."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol, assert_never

from adapters import wording
from adapters.answer_slots import ANSWERS_IN_FLIGHT_MAX, AnswerSlots
from adapters.streaming import (
    Clock,
    MessageStreamer,
    MessageTransport,
    RateBudget,
    StreamLimits,
)
from adapters.streaming.splitter import close_open_fence
from adapters.streaming.transport import is_permanent
from core import metrics, observe
from core import wording as engine_wording
from core.approvals import ApprovalView, ClickResult
from core.citations import Citation, cite
from core.events import (
    AnswerDelta,
    ApprovalRequired,
    Done,
    Event,
    Failed,
    RunStarted,
    SourceItem,
    Sources,
    Stopped,
    ToolCallFinished,
    ToolCallStarted,
)
from core.ports import FinalOutbox, FinalPart, LiveAnswerLog, LiveMessage, PendingFinal

log = logging.getLogger(__name__)

INTERRUPT_WAIT_S = 5.0
CURSOR_CHAR = "▌"
# Kept finals older than this (OUTBOX_MAX_AGE_S) are dropped with an ERROR line: the only way one is given up.
OUTBOX_MAX_AGE_S = 86400.0
# Kept finals one pass claims at a time (each delivered before the next are claimed).
FINALS_PER_CLAIM = 2
# A delivered final's row dropped through a database blip: tried again after these pauses, then given up (logged).
OUTBOX_DELIVERED_RETRY_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)
# A live record written or dropped during a database blip is tried again after these pauses, then each round.
LIVE_WRITE_RETRY_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)
INTENT_MARK = "intent:"  # a live record of a post about to be sent (no message id yet); see intent_id
# An intent of an answer's first post holds its first characters (no fewer than the minimum, or none).
INTENT_HEAD_CHARS = 48
INTENT_HEAD_MIN_CHARS = 16


@dataclass(frozen=True, kw_only=True)
class AnswerPlace:
    """Where an answer's messages live, as recorded while they stream."""

    platform: str
    workspace: str
    channel: str
    thread: str = ""


@dataclass(frozen=True, kw_only=True)
class Pacing:
    """How one answer streams: message limits and the rate budgets its posts and edits draw on."""

    limits: StreamLimits
    edit_budget: RateBudget
    post_budget: RateBudget
    clock: Clock
    key: Hashable = None  # the streamer's fairness key in shared budgets; None: one per answer
    start_on_first_event: bool = False  # post nothing until the engine says something


class Surface(MessageTransport, Protocol):
    """A platform's end of one answer: posting and editing its messages, and what goes around them."""

    place: AnswerPlace
    pacing: Pacing

    async def show_working(self) -> None:
        """The first sign of life, before any message (Discord's typing indicator; nothing where a placeholder does it)."""
        ...

    async def show_approval(self, view: ApprovalView) -> dict[str, Any]:
        """Posts the approval message and returns the reference expiry will need to edit it."""
        ...

    async def show_sources(self, citations: tuple[Citation, ...], answer_ids: list[str]) -> None:
        """The sources the answer cites, under its numbers (ascending); called only when it cites some."""
        ...

    async def show_notice(self, text: str) -> None:
        """A short message in the answer's place (thread, DM or channel)."""
        ...


class AnswerControls(Protocol):
    """Optional on a Surface: the Stop button while an answer streams, and 👍/👎 under a final answer.

    Slack puts Stop on each live update of the message being written and 👍/👎 on the final text of the last one
    (blocks beside the text; a native stream, which takes no blocks while it streams, has a Stop message of its
    own, deleted as its final text goes); Discord puts Stop on the answer's first message as a component, which
    the final edit drops, and 👍/👎 on its last message by an edit after the final.

    `will_finish(run_id)`, optional too: the run is done and its final text is about to go (Slack's final texts
    then carry 👍/👎)."""

    async def show_stop(self, run_id: str) -> None:
        """The run is going: offer its Stop button (its custom id or value names `run_id`)."""
        ...

    async def end_stop(self) -> None:
        """The final text is about to go: edits from now on drop the Stop button."""
        ...

    async def clear_stop(self) -> None:
        """The answer ended: no Stop button is left anywhere (what the final edit did not drop)."""
        ...

    async def show_feedback(self, run_id: str, answer_ids: list[str]) -> None:
        """👍/👎 under the final answer of turn `run_id`."""
        ...


class ApprovalMessages(Protocol):
    """What the runner asks of the approval service (core.approvals.ApprovalService)."""

    async def remember_message(self, continuation_id: str, ref: dict[str, Any]) -> None: ...

    async def withdraw(self, continuation_id: str) -> bool: ...

    async def view(self, continuation_id: str) -> ApprovalView | None: ...


class ClickReply(Protocol):
    """How a platform answers the person who clicked."""

    async def redraw(self, view: ApprovalView) -> None:
        """Edits the clicked approval message to show `view`."""
        ...

    async def tell(self, text: str) -> None:
        """A private note to the clicker."""
        ...


class ShownMessages(Protocol):
    """Reads and rewrites a platform message as shown (rendered text), to repair what a crash left."""

    max_chars: int

    def render(self, markdown: str) -> str: ...

    async def read_shown(self, message: LiveMessage) -> str | None: ...

    async def replace_shown(self, message: LiveMessage, text: str) -> None: ...


class PostFinder(Protocol):
    """Optional on ShownMessages: finds the message a post recorded before it was sent may have made (its key
    `answer id:part`, read from `since`, epoch seconds), so crash repair finishes a message whose reply nobody saw."""

    async def find_post(self, message: LiveMessage, key: str, *, since: float) -> str | None: ...


class FinalDelivery(Protocol):
    """Delivers a kept final's parts on a platform, after the process that started it could not."""

    async def post_part(self, final: PendingFinal, index: int, text: str) -> str:
        """Posts part `index` unless the platform already shows it (marked with the answer id): no part twice."""
        ...

    async def edit_part(self, final: PendingFinal, message_id: str, text: str) -> None: ...


class PartFinder(Protocol):
    """Finds a part whose post was attempted without its outcome seen (Slack: by its metadata, read from the
    attempt on). A platform whose posts are idempotent by themselves (Discord's nonce) needs none."""

    async def find_part(self, final: PendingFinal, index: int, *, since: float) -> str | None: ...


@dataclass(kw_only=True, eq=False)
class _Answer:
    streamer: MessageStreamer
    task: asyncio.Task[Any] | None
    answer_id: str
    interrupted: bool = False
    pending: PendingFinal | None = None  # its final is kept in the outbox until delivered
    kept: bool = False  # `pending` as it is now reached the outbox (a failed keep may have left no row at all)
    handed_over: bool = False  # stopped with its final still pending: another delivery takes it


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
        self._live = live
        self._outbox = outbox
        self._outbox_max_age_s = outbox_max_age_s
        # Finals this process claimed and could not hand back (the database failed mid-pass).
        self._unreleased: set[str] = set()
        # Live-record writes that failed past their retries (the database was down), redone in order each round.
        self._unwritten: list[tuple[str, LiveMessage, str]] = []
        self._answers: set[_Answer] = set()
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
        pacing = surface.pacing
        place = surface.place
        answer: _Answer | None = None

        intents: dict[int, LiveMessage] = {}  # posts recorded before they were sent, by part
        heard = _Heard(events)

        async def post_intent(index: int, at: float) -> None:
            # What repair knows the message by where the platform gives no key back (Discord): a later part replies
            # to the part before it; the first shows the answer's start, whatever a crash left it showing.
            ids = answer.streamer.message_ids if answer is not None else []
            after = ids[index - 1] if 0 < index <= len(ids) else None
            head = heard.head() if index == 0 else None
            intent = LiveMessage(platform=place.platform, workspace=place.workspace, channel=place.channel,
                                 message_id=intent_id(answer_id, index, at, after=after, head=head),
                                 thread=place.thread)
            earlier = intents.get(index)
            intents[index] = intent
            await self._record(intent)
            if earlier is not None:
                await self._unrecord(earlier)  # a post refused (a 429) made nothing: this attempt replaces it

        async def posted(message_id: str) -> None:
            await self._record(
                LiveMessage(
                    platform=place.platform, workspace=place.workspace, channel=place.channel,
                    message_id=message_id, thread=place.thread,
                )
            )
            if intents:
                # Posts go in order: the oldest part still waiting for its reply is this one.
                await self._unrecord(intents.pop(min(intents)))
            if answer is not None and answer.pending is not None:
                await self._keep(answer, place, _with_posted(answer.pending.parts, message_id))

        async def delivered(message_ids: list[str]) -> None:
            # A message whose final text is delivered needs no repair, whatever happens next.
            await self._forget(place, message_ids)
            for index in sorted(intents):
                await self._unrecord(intents.pop(index))
            if answer is not None and answer.pending is not None and self._outbox is not None:
                answer.pending = None
                # Through a database blip: a row left behind would have its parts posted again by the next process.
                for delay_s in (*OUTBOX_DELIVERED_RETRY_S, None):
                    try:
                        await self._outbox.delivered(answer_id)
                        return
                    except Exception:
                        if delay_s is None:
                            raise
                        await asyncio.sleep(delay_s)

        async def pending(parts: list[tuple[str, str | None]]) -> None:
            if answer is not None:
                # With the posts already sent unseen, in the same write: whoever delivers next looks those up.
                await self._keep(answer, place, tuple(FinalPart(text=text, message_id=mid) for text, mid in parts),
                                 attempted=answer.streamer.post_attempts)

        async def post_attempt(index: int, at: float | None) -> bool:
            if self._outbox is None:
                return True
            if answer is not None and answer.pending is not None and not answer.kept:
                # Its keep failed (a database blip): with no row, attempting() would read as "handed over" and the
                # rest of the answer would be lost. Kept again first; a failure here is retried by the streamer.
                await self._keep(answer, place, answer.pending.parts, attempted=answer.streamer.post_attempts)
            # The kept final is still this process's to post (else it was handed over: post nothing).
            return await self._outbox.attempting(answer_id, index, at=at)

        streamer = MessageStreamer(
            surface,
            limits=pacing.limits,
            edit_budget=pacing.edit_budget,
            post_budget=pacing.post_budget,
            clock=pacing.clock,
            key=pacing.key if pacing.key is not None else object(),
            on_message_posted=posted,
            on_final_delivered=delivered,
            on_final_pending=pending if self._outbox is not None else None,
            on_post_attempt=post_attempt if self._outbox is not None else None,
            idempotency_key=answer_id,
            on_post_intent=post_intent,
        )
        answer = _Answer(streamer=streamer, task=asyncio.current_task(), answer_id=answer_id)
        self._answers.add(answer)
        ended = False
        try:
            await _play(heard, streamer, surface, self._approvals, start_at_once=not pacing.start_on_first_event,
                        stopped=lambda: answer.interrupted)
            ended = True
        except asyncio.CancelledError:
            # Cancelled by shutdown: interrupt_all ends the message; a bare close leaves its record
            # for the next start to repair, as a crash would. A final still pending goes to
            # whichever process delivers next.
            if answer.pending is not None and self._outbox is not None:
                # Release = cancel: the streamer waiting out a 429 must not post what another process delivers.
                streamer.abandon()
                await asyncio.shield(self._outbox.release(answer_id))
            raise
        except Exception:
            log.exception("answer failed while streaming in %s", place.channel)
            if not answer.interrupted:
                await streamer.fail(wording.failed(engine_wording.unexpected_error()))
            ended = True
        finally:
            self._answers.discard(answer)
            if ended or answer.interrupted:
                await asyncio.shield(self._forget(place, streamer.message_ids))

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

    def cancel_all(self) -> list[asyncio.Task[Any]]:
        """Cancels every streaming task without touching the platform (their records stay for the next start)."""
        self._slots.abandon()
        tasks = [answer.task for answer in self._answers if answer.task is not None and not answer.task.done()]
        for task in tasks:
            task.cancel()
        return tasks

    async def repair_leftovers(self, shown: ShownMessages) -> int:
        """At start and every round: every answer a dead process left streaming keeps the text it showed, plus the
        interrupted note on its last message. A record goes only once its repair succeeded or failed for good; a 429
        or an outage hands it back for the next round."""
        await self._write_unwritten()
        answers: dict[str, list[LiveMessage]] = {}
        for position, record in enumerate(await self._live.take_all(self.platform)):
            # A record of no known answer (written before records named theirs) is an answer of its own.
            answers.setdefault(getattr(record, "answer_id", "") or f"#{position}", []).append(record)
        repaired = 0
        for records in answers.values():
            repaired += await self._repair_answer(records, shown)
        if repaired:
            log.info("repaired %d unfinished %s answers", repaired, self.platform)
        return repaired

    async def _repair_answer(self, records: list[LiveMessage], shown: ShownMessages) -> int:
        """One answer's records, in the order written (its parts' order): its messages keep the text they show, and
        the last one found gets the note; an earlier part shows its own text, which a note would cut in the middle
        of the answer. A failure for now hands all of them back (a part whose successor was not looked up is not the
        last); returns how many messages were finished."""
        note = shown.render(wording.interrupted())
        finder = getattr(shown, "find_post", None)
        try:
            messages: dict[str, LiveMessage] = {}  # each once: a message's own record and its post's intent
            for record in records:
                found = await _posted_message(record, finder)
                if found is not None:
                    messages.setdefault(found.message_id, found)
            ordered = list(messages.values())
            for position, message in enumerate(ordered):
                try:
                    text = await shown.read_shown(message) or ""
                    if position < len(ordered) - 1 and (sealed := _sealed_text(text)) is not None:
                        if sealed != text:
                            await shown.replace_shown(message, sealed)
                    # Already repaired (its record outlived the repair, then its repairer): one note, never two.
                    elif not text.rstrip().endswith(note.rstrip()):
                        await shown.replace_shown(message, repaired_text(text, note, max_chars=shown.max_chars))
                except Exception as error:
                    if not is_permanent(error):
                        raise
                    log.exception("message %s in %s cannot be repaired; giving it up", message.message_id,
                                  message.channel)
        except Exception as error:
            if not is_permanent(error):
                log.warning("could not repair message %s in %s yet (%s); trying again next round",
                            records[-1].message_id, records[-1].channel, error)
                for record in records:
                    await self._live.release(record)
                return 0
            log.exception("an answer in %s cannot be repaired; giving it up", records[-1].channel)
            ordered = []
        for record in records:
            await self._unrecord(record)
        return len(ordered)

    async def deliver_pending(self, delivery: FinalDelivery, *, finder: PartFinder | None = None) -> int:
        """Delivers the finals nobody else is delivering (their process stopped or died, or was told "later");
        returns how many arrived. A part whose post was attempted without its outcome seen is looked up first
        (`finder`), no other. Any failure but a documented permanent one hands the final back, to be retried
        with backoff (capped at 5 minutes); only a permanent error, or OUTBOX_MAX_AGE_S, drops it."""
        if self._outbox is None:
            return 0
        outbox = self._outbox
        for expired in await outbox.expire(self.platform, max_age_s=self._outbox_max_age_s):
            metrics.OUTBOX_EXPIRED.labels(self.platform).inc()
            log.error("final %s to %s not delivered in %g s; dropping it", expired.answer_id, expired.channel,
                      self._outbox_max_age_s)
        for answer_id in sorted(self._unreleased):
            await outbox.release(answer_id)  # the database is back: nothing left to wait for
            self._unreleased.discard(answer_id)
        arrived = 0
        # Claimed a few at a time: a process never sits on finals it will not reach for a while, which every
        # other live process may not take (a pass behind 60 slow deliveries held the 61st for minutes).
        seen: set[str] = set()
        while taken := await outbox.take(self.platform, limit=FINALS_PER_CLAIM):
            # A final handed back this pass waits for the next one (its backoff keeps the store from giving it
            # again; this keeps any outbox from making the pass go round forever).
            for final in (again := [f for f in taken if f.answer_id in seen]):
                await outbox.release(final.answer_id)
            taken = [f for f in taken if f.answer_id not in seen]
            if not taken and again:
                break
            seen.update(f.answer_id for f in taken)
            for position, final in enumerate(taken):
                try:
                    arrived += await self._deliver_one(final, delivery, finder)
                except BaseException:
                    # A database failure (or a cancel) mid-pass leaves these claimed by a live process, and take()
                    # never hands a live process its own claims: give them back on the next pass.
                    self._unreleased.update(f.answer_id for f in taken[position:])
                    raise
        return arrived

    async def _deliver_one(self, final: PendingFinal, delivery: FinalDelivery, finder: PartFinder | None) -> int:
        """One kept final: 1 when it arrived; 0 when it was handed back, handed over or dropped as undeliverable."""
        assert self._outbox is not None
        outbox = self._outbox
        parts = list(final.parts)
        try:
            attempted = await outbox.attempts(final.answer_id) if finder is not None else {}
            for index, part in enumerate(parts):
                if part.message_id is not None:
                    await delivery.edit_part(final, part.message_id, part.text)
                    continue
                message_id = None
                if finder is not None and index in attempted:
                    message_id = await finder.find_part(final, index, since=attempted[index])
                    if message_id is not None:
                        # It may show a text of the stream before it (a cursor): the final text replaces it.
                        await delivery.edit_part(final, message_id, part.text)
                if message_id is None:
                    if not await outbox.attempting(final.answer_id, index):
                        raise _HandedOver(final.answer_id)
                    message_id = await delivery.post_part(final, index, part.text)
                parts[index] = FinalPart(text=part.text, message_id=message_id)
                await outbox.keep(_replace_parts(final, parts))
        except _HandedOver:
            log.info("final %s was taken over by another process", final.answer_id)
            return 0
        except Exception as error:
            if is_permanent(error):
                log.exception("final %s cannot be delivered to %s; dropping it", final.answer_id, final.channel)
                await outbox.delivered(final.answer_id)
                return 0
            log.warning("final %s not delivered yet (%s); handed back, retried after a backoff",
                        final.answer_id, error or type(error).__name__)
            await outbox.release(final.answer_id, backoff=True)
            return 0
        await outbox.delivered(final.answer_id)
        await self._forget(AnswerPlace(platform=final.platform, workspace=final.workspace, channel=final.channel),
                           [p.message_id for p in parts if p.message_id])
        return 1

    async def _keep(
        self, answer: _Answer, place: AnswerPlace, parts: tuple[FinalPart, ...], *, attempted: dict[int, float] | None = None
    ) -> None:
        """The final goes to the outbox, with the posts of its parts sent unseen (`attempted`); its messages leave the
        live records (the outbox finishes them, not repair)."""
        if self._outbox is None:
            return
        final = answer.pending = PendingFinal(
            answer_id=answer.answer_id, platform=place.platform, workspace=place.workspace, channel=place.channel,
            thread=place.thread, parts=parts,
        )
        answer.kept = False
        await self._outbox.keep(final, attempted=attempted or None)
        # A keep of other parts that began meanwhile has the last word: only it may say the row is up to date.
        answer.kept = answer.pending is final
        await self._forget(place, [part.message_id for part in parts if part.message_id])

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

    async def _forget(self, place: AnswerPlace, message_ids: list[str]) -> None:
        for message_id in message_ids:
            await self._unrecord(LiveMessage(platform=place.platform, workspace=place.workspace, channel=place.channel,
                                             message_id=message_id, thread=place.thread))

    async def _record(self, message: LiveMessage) -> None:
        """A live record, written through a database blip; else remembered and written on the next round."""
        await self._write_live("add", message)

    async def _unrecord(self, message: LiveMessage) -> None:
        """A live record dropped through a database blip; else remembered and dropped on the next round, so a
        message whose answer ended (or that was repaired) is never repaired again."""
        await self._write_live("remove", message)

    async def _write_live(self, kind: str, message: LiveMessage) -> None:
        # The run being played names the answer a record belongs to (LiveMessages.add): kept for a later round.
        run = observe.current_run()
        write = (kind, message, run.run_id if run is not None else "")
        if self._unwritten:
            # Writes of one message keep their order: a record is never added after its removal.
            self._unwritten.append(write)
            await self._write_unwritten()
            return
        for delay_s in (*LIVE_WRITE_RETRY_S, None):
            try:
                await self._apply_live(*write)
                return
            except Exception as error:
                if delay_s is None:
                    log.warning("could not %s the live record of message %s (%s); trying again next round",
                                kind, message.message_id, error)
                    self._unwritten.append(write)
                    return
                await asyncio.sleep(delay_s)

    async def _write_unwritten(self) -> None:
        while self._unwritten:
            try:
                await self._apply_live(*self._unwritten[0])
            except Exception as error:
                log.warning("live records still not written (%s); %d waiting", error, len(self._unwritten))
                return
            self._unwritten.pop(0)

    async def _apply_live(self, kind: str, message: LiveMessage, answer_id: str) -> None:
        if kind == "add" and answer_id:
            with observe.run_scope(run_id=answer_id, platform=self.platform):
                await self._live.add(message)
        elif kind == "add":
            await self._live.add(message)
        else:
            await self._live.remove(platform=message.platform, channel=message.channel, message_id=message.message_id)


async def _play(
    events: AsyncIterator[Event],
    streamer: MessageStreamer,
    surface: Surface,
    approvals: ApprovalMessages,
    *,
    start_at_once: bool,
    stopped: Any,
) -> None:
    started = False
    if start_at_once:
        await streamer.start()
        started = True
    sources: tuple[SourceItem, ...] = ()
    written: list[str] = []
    wrote = False
    run_id = ""
    try:
        async for event in events:
            if stopped():
                return
            if not started:
                await streamer.start()
                started = True
            if run_id and isinstance(event, (ApprovalRequired, Done, Failed)):
                # The final edit (Discord) drops the Stop button; no click may stop a run that ended.
                await _control(surface, "end_stop")
            match event:
                case RunStarted():
                    run_id = event.run_id
                    await _control(surface, "show_stop", run_id)
                case AnswerDelta():
                    wrote = wrote or bool(event.text.strip())
                    written.append(event.text)
                    streamer.append(event.text)
                case ToolCallStarted():
                    streamer.set_status(wording.tool_running(event.tool))
                case ToolCallFinished():
                    streamer.set_status(None)
                case Sources():
                    sources = event.items
                case ApprovalRequired():
                    streamer.set_status(None)
                    await streamer.finish(None if wrote else wording.waiting_for_approval())
                    await _show_approval(event, surface, approvals)
                    return
                case Done():
                    # What this stream showed is its final text: a resumed run's message holds only
                    # what came after the pause (the earlier part is in the message before). A
                    # citation that names no source goes (it may have been shown while streaming);
                    # the sources reply lists what the whole answer cites, in its numbering.
                    shown = cite("".join(written) if wrote else event.answer, sources)
                    if run_id:
                        # Slack's final text carries 👍/👎 itself (one call fewer than an edit after it).
                        await _control(surface, "will_finish", run_id)
                    ids = await streamer.finish(shown.text)
                    # Delivered: the run is over (a shutdown waits for it no longer); what follows is cosmetic.
                    await _end_run(events)
                    citations = cite(event.answer, sources).citations
                    if citations:
                        try:
                            await surface.show_sources(citations, ids)
                        except Exception:
                            log.exception("could not post the sources of an answer")
                    if run_id:
                        await _control(surface, "show_feedback", run_id, ids)
                    return
                case Stopped():
                    # What the user already read stays, with who stopped it under it.
                    await streamer.interrupt(event.message)
                    return
                case Failed():
                    if wrote:
                        # What the user already read stays (a model cut off mid-answer, a turn the
                        # database could not store); the sentence follows it.
                        await streamer.interrupt(wording.failed(event.message))
                    else:
                        await streamer.fail(wording.failed(event.message))
                    return
                case _:
                    assert_never(event)
    finally:
        await _end_run(events)
        if run_id:
            await asyncio.shield(_control(surface, "clear_stop"))
    if not stopped():
        # The run ended without saying how: show what was written.
        await streamer.finish()


async def _end_run(events: AsyncIterator[Event]) -> None:
    """Closes the engine's event stream, which ends its run (a closed stream closes again harmlessly)."""
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()


async def _control(surface: Surface, name: str, *args: Any) -> None:
    """One of the surface's AnswerControls, when it has them; a failure costs the button, never the answer."""
    method = getattr(surface, name, None)
    if method is None:
        return
    try:
        await method(*args)
    except Exception:
        log.exception("could not %s", name.replace("_", " "))


async def _show_approval(event: ApprovalRequired, surface: Surface, approvals: ApprovalMessages) -> None:
    """A paused run whose approval message cannot be posted is withdrawn, so nothing waits where nobody sees it."""
    try:
        ref = await surface.show_approval(ApprovalView.from_event(event))
    except Exception:
        log.exception("could not post approval request %s; withdrawing it", event.continuation_id)
        await approvals.withdraw(event.continuation_id)
        await surface.show_notice(wording.approval_not_shown())
        return
    try:
        await approvals.remember_message(event.continuation_id, ref)
    except Exception:
        # The request is shown and clickable; only its expiry edit will not find the message.
        log.exception("could not remember the message of approval %s", event.continuation_id)


class _HandedOver(Exception):
    """The final is no longer this process's to deliver."""


class _Heard:
    """A run's events as they are played, with the start of the answer text said so far: how an answer's first
    message is known where the platform gives a post's key back nowhere (Discord), whatever a crash left it showing."""

    def __init__(self, events: AsyncIterator[Event]) -> None:
        self._events = events
        self._head = ""

    def __aiter__(self) -> _Heard:
        return self

    async def __anext__(self) -> Event:
        event = await anext(self._events)
        if isinstance(event, AnswerDelta) and len(self._head) < INTENT_HEAD_CHARS:
            self._head = (self._head + event.text).lstrip()[:INTENT_HEAD_CHARS]
        return event

    async def aclose(self) -> None:
        close = getattr(self._events, "aclose", None)
        if close is not None:
            await close()

    def head(self) -> str | None:
        """The answer's first characters, once there are enough of them to tell it from another answer's."""
        return self._head if len(self._head.strip()) >= INTENT_HEAD_MIN_CHARS else None


def _sealed_text(shown: str) -> str | None:
    """What an earlier part of an answer left streaming becomes: its text without cursor (None: it shows none)."""
    text = shown.replace(" " + CURSOR_CHAR, "").replace(CURSOR_CHAR, "").rstrip()
    if text in ("", "_thinking…_"):
        return None
    return close_open_fence(text) if text != shown.rstrip() else shown


def repaired_text(shown: str, note: str, *, max_chars: int) -> str:
    """What an answer left streaming becomes: its text so far, without cursor or placeholder, plus `note`."""
    text = shown.replace(" " + CURSOR_CHAR, "").replace(CURSOR_CHAR, "").rstrip()
    if text in ("", "_thinking…_"):
        return note
    text = close_open_fence(text)
    room = max_chars - len(note) - 2
    if len(text) > room:
        text = close_open_fence(text[: room - len("\n```") - 1])
    return f"{text}\n\n{note}"


def intent_id(answer_id: str, index: int, at: float, *, after: str | None = None, head: str | None = None) -> str:
    """The live record of a post about to be sent: it names the part's key and the attempt's time, not a message;
    and, for a look-up that has no key to go by, the message the part comes `after` (the answer's part before it)
    and the `head` of the text it shows (the first part: the answer's start). See PostIntent."""
    extras = (f"|after={after}" if after else "") + (f"|head={head}" if head else "")
    return f"{INTENT_MARK}{answer_id}:{index}@{at:.3f}{extras}"


@dataclass(frozen=True, kw_only=True)
class PostIntent:
    """A post's intent record read back (intent_id): its part's key `answer id:index`, the attempt's time (epoch
    seconds), and what else its message is known by."""

    key: str
    index: int
    at: float
    after: str | None = None
    head: str | None = None


def post_intent_of(message_id: str) -> PostIntent | None:
    """The intent a live record's message id names (None: the record is a message's own)."""
    if not message_id.startswith(INTENT_MARK):
        return None
    # The key has no "@" and the time no "|"; the head, which may hold either, comes last.
    key, _, rest = message_id.removeprefix(INTENT_MARK).partition("@")
    at, _, extras = rest.partition("|")
    after = head = None
    if extras.startswith("after="):
        after, _, extras = extras.removeprefix("after=").partition("|")
    if extras.startswith("head="):
        head = extras.removeprefix("head=")
    index = key.rpartition(":")[2]
    return PostIntent(key=key, index=int(index) if index.isdigit() else 0, at=float(at or 0), after=after or None,
                      head=head or None)


async def _posted_message(record: LiveMessage, finder: Any) -> LiveMessage | None:
    """The message a live record stands for: itself; for a post's intent, the message found (None: never made, or
    the platform gives no way to look)."""
    intent = post_intent_of(record.message_id)
    if intent is None:
        return record
    if finder is None or not intent.key:
        return None
    message_id = await finder(record, intent.key, since=intent.at)
    if message_id is None:
        return None
    return LiveMessage(platform=record.platform, workspace=record.workspace, channel=record.channel,
                       message_id=message_id, thread=record.thread)


def _with_posted(parts: tuple[FinalPart, ...], message_id: str) -> tuple[FinalPart, ...]:
    """The parts with a newly posted message given to the first part that had none (messages post in order);
    unchanged when a part has it already (the final was kept after the post's reply, before this record of it)."""
    if any(part.message_id == message_id for part in parts):
        return parts
    updated = list(parts)
    for index, part in enumerate(updated):
        if part.message_id is None:
            updated[index] = FinalPart(text=part.text, message_id=message_id)
            break
    return tuple(updated)


def _replace_parts(final: PendingFinal, parts: list[FinalPart]) -> PendingFinal:
    return PendingFinal(
        answer_id=final.answer_id, platform=final.platform, workspace=final.workspace, channel=final.channel,
        thread=final.thread, parts=tuple(parts),
    )
