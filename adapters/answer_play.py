"""Plays one answer: its run's events into a streamer whose callbacks keep the answer's live records and its kept
final up to date."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import assert_never

from adapters import wording
from adapters.answer_protocols import AnswerControls, ApprovalMessages, Surface
from adapters.live_records import INTENT_HEAD_CHARS, INTENT_HEAD_MIN_CHARS, LiveRecords, intent_id, message_at
from adapters.streaming import MessageStreamer
from core import wording as engine_wording
from core.approvals import ApprovalView
from core.citations import cite
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
from core.ports import FinalOutbox, FinalPart, LiveMessage, PendingFinal

log = logging.getLogger(__name__)

# A delivered final's row dropped through a database blip: tried again after these pauses, then given up (logged).
OUTBOX_DELIVERED_RETRY_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)


class PlayedAnswer:
    """One answer in flight: its streamer, the posts recorded before they are sent (by part), and its final while
    it is kept in the outbox (`pending`)."""

    def __init__(
        self, events: AsyncIterator[Event], surface: Surface, *, answer_id: str, records: LiveRecords,
        outbox: FinalOutbox | None,
    ) -> None:
        self.answer_id = answer_id
        self.task = asyncio.current_task()
        self.interrupted = False
        self.pending: PendingFinal | None = None  # its final is kept in the outbox until delivered
        self.kept = False  # `pending` as it is now reached the outbox (a failed keep may have left no row at all)
        self.handed_over = False  # stopped with its final still pending: another delivery takes it
        self._surface = surface
        self._place = surface.place
        self._records = records
        self._outbox = outbox
        self._heard = _Heard(events)
        self._intents: dict[int, LiveMessage] = {}  # posts recorded before they were sent, by part
        pacing = surface.pacing
        self.streamer = MessageStreamer(
            surface,
            limits=pacing.limits,
            edit_budget=pacing.edit_budget,
            post_budget=pacing.post_budget,
            clock=pacing.clock,
            key=pacing.key if pacing.key is not None else object(),
            on_message_posted=self._posted,
            on_final_delivered=self._delivered,
            on_final_pending=self._pending if outbox is not None else None,
            on_post_attempt=self._post_attempt if outbox is not None else None,
            idempotency_key=answer_id,
            on_post_intent=self._post_intent,
            since=pacing.since,
            sign_shown=pacing.sign_shown,
        )

    @property
    def workspace(self) -> str:
        """The workspace the answer is shown in (a Slack team, a Discord guild)."""
        return self._place.workspace

    async def play(self, approvals: ApprovalMessages) -> bool:
        """Plays the run to its end; True when the answer ended here (False never: a cancel is raised)."""
        try:
            playback = Playback(self._heard, self.streamer, self._surface, approvals, stopped=lambda: self.interrupted)
            await playback.run(start_at_once=not self._surface.pacing.start_on_first_event)
            return True
        except asyncio.CancelledError:
            # Cancelled by shutdown: interrupt_all ends the message; a bare close leaves its record
            # for the next start to repair, as a crash would. A final still pending goes to
            # whichever process delivers next.
            if self.pending is not None and self._outbox is not None:
                # Release = cancel: the streamer waiting out a 429 must not post what another process delivers.
                self.streamer.abandon()
                await asyncio.shield(self._outbox.release(self.answer_id))
            raise
        except Exception:
            log.exception("answer failed while streaming in %s", self._place.channel)
            if not self.interrupted:
                await self.streamer.fail(wording.failed(engine_wording.unexpected_error()))
            return True

    async def _post_intent(self, index: int, at: float) -> None:
        # What repair knows the message by where the platform gives no key back (Discord): a later part replies
        # to the part before it; the first shows the answer's start, whatever a crash left it showing.
        ids = self.streamer.message_ids
        after = ids[index - 1] if 0 < index <= len(ids) else None
        head = self._heard.head() if index == 0 else None
        intent = message_at(self._place, intent_id(self.answer_id, index, at, after=after, head=head))
        earlier = self._intents.get(index)
        self._intents[index] = intent
        await self._records.record(intent)
        if earlier is not None:
            await self._records.unrecord(earlier)  # a post refused (a 429) made nothing: this attempt replaces it

    async def _posted(self, message_id: str) -> None:
        await self._records.record(message_at(self._place, message_id))
        if self._intents:
            # Posts go in order: the oldest part still waiting for its reply is this one.
            await self._records.unrecord(self._intents.pop(min(self._intents)))
        if self.pending is not None:
            await self._keep(_with_posted(self.pending.parts, message_id))

    async def _delivered(self, message_ids: list[str]) -> None:
        # A message whose final text is delivered needs no repair, whatever happens next.
        await self._records.forget(self._place, message_ids)
        for index in sorted(self._intents):
            await self._records.unrecord(self._intents.pop(index))
        if self.pending is not None and self._outbox is not None:
            self.pending = None
            # Through a database blip: a row left behind would have its parts posted again by the next process.
            for delay_s in (*OUTBOX_DELIVERED_RETRY_S, None):
                try:
                    await self._outbox.delivered(self.answer_id)
                    return
                except Exception:
                    if delay_s is None:
                        raise
                    await asyncio.sleep(delay_s)

    async def _pending(self, parts: list[tuple[str, str | None]]) -> None:
        # With the posts already sent unseen, in the same write: whoever delivers next looks those up.
        await self._keep(tuple(FinalPart(text=text, message_id=mid) for text, mid in parts),
                         attempted=self.streamer.post_attempts)

    async def _post_attempt(self, index: int, at: float | None) -> bool:
        if self._outbox is None:
            return True
        if self.pending is not None and not self.kept:
            # Its keep failed (a database blip): with no row, attempting() would read as "handed over" and the
            # rest of the answer would be lost. Kept again first; a failure here is retried by the streamer.
            await self._keep(self.pending.parts, attempted=self.streamer.post_attempts)
        # The kept final is still this process's to post (else it was handed over: post nothing).
        return await self._outbox.attempting(self.answer_id, index, at=at)

    async def _keep(self, parts: tuple[FinalPart, ...], *, attempted: dict[int, float] | None = None) -> None:
        """The final goes to the outbox, with the posts of its parts sent unseen (`attempted`); its messages leave the
        live records (the outbox finishes them, not repair)."""
        if self._outbox is None:
            return
        place = self._place
        final = self.pending = PendingFinal(
            answer_id=self.answer_id, platform=place.platform, workspace=place.workspace, channel=place.channel,
            thread=place.thread, parts=parts,
        )
        self.kept = False
        await self._outbox.keep(final, attempted=attempted or None)
        # A keep of other parts that began meanwhile has the last word: only it may say the row is up to date.
        self.kept = self.pending is final
        await self._records.forget(place, [part.message_id for part in parts if part.message_id])


class Playback:
    """A run's events shown through the answer's streamer, one at a time, until the run ends; the answer message
    always ends in a final state."""

    def __init__(
        self, events: AsyncIterator[Event], streamer: MessageStreamer, surface: Surface, approvals: ApprovalMessages,
        *, stopped: Callable[[], bool],
    ) -> None:
        self._events = events
        self._streamer = streamer
        self._surface = surface
        self._controls = surface if isinstance(surface, AnswerControls) else None
        self._approvals = approvals
        self._stopped = stopped
        self._started = False
        self._sources: tuple[SourceItem, ...] = ()
        self._written: list[str] = []
        self._wrote = False
        self._run_id = ""

    async def run(self, *, start_at_once: bool) -> None:
        if start_at_once:
            await self._start()
        try:
            async for event in self._events:
                if self._stopped():
                    return
                await self._start()
                if self._run_id and isinstance(event, (ApprovalRequired, Done, Failed)):
                    # The final edit (Discord) drops the Stop button; no click may stop a run that ended.
                    await self._control("end stop", lambda controls: controls.end_stop())
                if await self._show(event):
                    return
        finally:
            await end_run(self._events)
            if self._run_id:
                await asyncio.shield(self._control("clear stop", lambda controls: controls.clear_stop()))
        if not self._stopped():
            # The run ended without saying how: show what was written.
            await self._streamer.finish()

    async def _start(self) -> None:
        if not self._started:
            await self._streamer.start()
            self._started = True

    async def _show(self, event: Event) -> bool:
        """Shows one event; True when it ended the answer."""
        match event:
            case RunStarted():
                self._run_id = run_id = event.run_id
                await self._control("show stop", lambda controls: controls.show_stop(run_id))
            case AnswerDelta():
                self._wrote = self._wrote or bool(event.text.strip())
                self._written.append(event.text)
                self._streamer.append(event.text)
            case ToolCallStarted():
                self._streamer.set_status(wording.tool_running(event.tool))
            case ToolCallFinished():
                self._streamer.set_status(None)
            case Sources():
                self._sources = event.items
            case ApprovalRequired():
                self._streamer.set_status(None)
                await self._streamer.finish(None if self._wrote else wording.waiting_for_approval())
                await show_approval(event, self._surface, self._approvals)
                return True
            case Done():
                await self._finish(event)
                return True
            case Stopped():
                # What the user already read stays, with who stopped it under it.
                await self._streamer.interrupt(event.message)
                return True
            case Failed():
                await self._fail(event)
                return True
            case _:
                assert_never(event)
        return False

    async def _finish(self, event: Done) -> None:
        # What this stream showed is its final text: a resumed run's message holds only what came after the pause
        # (the earlier part is in the message before). A citation that names no source goes (it may have been
        # shown while streaming); the sources reply lists what the whole answer cites, in its numbering.
        shown = cite("".join(self._written) if self._wrote else event.answer, self._sources)
        run_id = self._run_id
        if run_id:
            # Slack's final text carries 👍/👎 itself (one call fewer than an edit after it).
            await self._control("will finish", lambda controls: controls.will_finish(run_id))
        ids = await self._streamer.finish(shown.text)
        # Delivered: the run is over (a shutdown waits for it no longer); what follows is cosmetic.
        await end_run(self._events)
        citations = cite(event.answer, self._sources).citations
        if citations:
            try:
                await self._surface.show_sources(citations, ids)
            except Exception:
                log.exception("could not post the sources of an answer")
        if run_id:
            await self._control("show feedback", lambda controls: controls.show_feedback(run_id, ids))

    async def _fail(self, event: Failed) -> None:
        if self._wrote:
            # What the user already read stays (a model cut off mid-answer, a turn the database could not store);
            # the sentence follows it.
            await self._streamer.interrupt(wording.failed(event.message))
        else:
            await self._streamer.fail(wording.failed(event.message))

    async def _control(self, what: str, step: Callable[[AnswerControls], Awaitable[None]]) -> None:
        """One of the surface's AnswerControls, when it has them; a failure costs the button, never the answer."""
        if self._controls is None:
            return
        try:
            await step(self._controls)
        except Exception:
            log.exception("could not %s", what)


async def end_run(events: AsyncIterator[Event]) -> None:
    """Closes the engine's event stream, which ends its run (a closed stream closes again harmlessly)."""
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()


async def show_approval(event: ApprovalRequired, surface: Surface, approvals: ApprovalMessages) -> None:
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

