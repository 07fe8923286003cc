"""Streams one answer into platform messages from a background editor task: coalesced, paced,
split across messages, and always finished."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from contextlib import nullcontext
from typing import Literal

from core import metrics, observe

from .answer_place import answer_context, queued_from
from .clock import Clock, MonotonicClock
from .deadline import CallDeadline, unless_set
from .fair_queue import Priority
from .final_delivery import FinalDelivery, Prepaid
from .layout import Ending, Layout
from .limits import StreamLimits
from .part_messages import OnMessagePosted, OnPostAttempt, OnPostIntent, PartMessages, Slot
from .rate_budget import RateBudget
from .transport import MessageTransport, RateLimited, TransientSendError

__all__ = ["MessageStreamer", "OnFinalDelivered", "OnFinalPending", "OnMessagePosted", "OnPostAttempt", "OnPostIntent"]

logger = logging.getLogger(__name__)

OnFinalDelivered = Callable[[list[str]], Awaitable[None]]
# Told once, when a final text could not be delivered at the first try: its parts, each with the id
# of the message that shows (or will show) it, so the text can be kept safe until it arrives.
OnFinalPending = Callable[[list[tuple[str, str | None]]], Awaitable[None]]
# A final not delivered this long (platform time) after the answer ended is reported pending, so it
# is kept safe while it waits (a spent or paused budget, a slow platform).
FINAL_PENDING_AFTER_S = 2.0

SendOutcome = Literal["sent", "rate_limited", "failed"]


class MessageStreamer:
    """Shows one answer as it is written, by posting and editing messages in a background task.

    The LLM loop calls `append` (synchronous, never waits) and `set_status`; the editor task
    always sends the latest text, so whatever arrived during an edit is coalesced into the next.
    """

    def __init__(
        self,
        transport: MessageTransport,
        *,
        limits: StreamLimits,
        edit_budget: RateBudget,
        post_budget: RateBudget,
        clock: Clock | None = None,
        key: Hashable = None,
        on_message_posted: OnMessagePosted | None = None,
        on_final_delivered: OnFinalDelivered | None = None,
        on_final_pending: OnFinalPending | None = None,
        on_post_attempt: OnPostAttempt | None = None,
        idempotency_key: str | None = None,
        on_post_intent: OnPostIntent | None = None,
        since: float | None = None,
        sign_shown: Callable[[], bool] | None = None,
    ) -> None:
        self._limits = limits
        self._sign_shown = sign_shown or (lambda: False)  # another sign shows the answer is coming (Slack's status)
        self._edit_budget = edit_budget
        self._post_budget = post_budget
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._key: Hashable = key if key is not None else id(self)
        # The answer's age orders its calls in every budget queue, those its transport makes too (answer_context).
        self._since = self._clock.now() if since is None else since
        self._on_final_delivered = on_final_delivered
        self._on_final_pending = on_final_pending
        self._final_texts: list[str] | None = None  # the final's parts, once its delivery laid them out
        self._pending_told = False
        self._pending_watch: asyncio.Task[None] | None = None
        self._pieces: list[str] = []
        self._text = ""
        self._layout = Layout(limits)
        self._status: str | None = None
        self._slots: list[Slot] = [Slot(index=0)]
        self._changed = asyncio.Event()
        self._wrote = asyncio.Event()  # answer text (not only whitespace) has been appended
        self._ending_requested = asyncio.Event()
        self._ending: Ending | None = None
        self._delivered = False
        self._prepaid = Prepaid()
        self._task: asyncio.Task[None] | None = None
        self._messages = PartMessages(
            transport, call=CallDeadline(self._clock, limits.call_timeout_s), idempotency_key=idempotency_key,
            on_message_posted=on_message_posted, on_post_attempt=on_post_attempt, on_post_intent=on_post_intent,
        )
        self._final = FinalDelivery(
            self._messages, post_budget=post_budget, edit_budget=edit_budget, limits=limits, clock=self._clock,
            key=self._key, prepaid=self._prepaid, waiting=self._final_pending, kept=lambda: self._pending_told,
        )

    # --- what the LLM loop and the adapter call ---

    @property
    def message_ids(self) -> list[str]:
        return [slot.message_id for slot in self._slots if slot.message_id is not None]

    async def start(self) -> None:
        """Starts the editor task, which posts the first text as soon as it comes, or the placeholder
        if none came within `limits.placeholder_after_s`; returns without waiting."""
        if self._task is None:
            self._task = self._new_task()

    def append(self, text: str) -> None:
        """Adds answer text. Never waits: the editor task picks it up."""
        if self._ending is not None:
            raise RuntimeError("append() after the answer was ended")
        if text:
            self._pieces.append(text)
            if not self._wrote.is_set() and text.strip():
                self._wrote.set()
            self._changed.set()

    def set_status(self, line: str | None) -> None:
        """Shows a progress line (e.g. a running tool) under the text; None removes it."""
        line = " ".join(line.split()) if line else ""
        cap = self._limits.status_max_chars
        self._status = (line if len(line) <= cap else line[: cap - 1] + "…") or None
        self._changed.set()

    async def finish(self, final_text: str | None = None) -> list[str]:
        """Delivers the final text (default: what was appended) and returns all message ids."""
        await self._end(Ending(kind="finish", text=final_text))
        return self.message_ids

    async def fail(self, message: str) -> None:
        """Replaces the answer in the current message with `message`, delivered like a final."""
        await self._end(Ending(kind="fail", text=message))

    @property
    def post_attempts(self) -> dict[int, float]:
        """Parts whose post was sent without its outcome seen (it may exist), and when (epoch seconds)."""
        return {
            index: slot.attempted_at for index, slot in enumerate(self._slots)
            if slot.message_id is None and slot.attempted_at is not None
        }

    def abandon(self) -> None:
        """The answer's final was handed to another process: this streamer sends nothing more (its task is
        cancelled; a post under way is left to the outbox's look-up)."""
        self._messages.handed_over = True
        for task in (self._task, self._pending_watch):
            if task is not None and not task.done():
                task.cancel()

    async def interrupt(self, note: str) -> None:
        """Ends the answer with what was written so far plus `note` (shutdown, lost run).

        If an ending is already being delivered, waits for it instead; if that one gave up
        without delivering, the note is delivered in its place.
        """
        await self._end(Ending(kind="interrupt", text=note))

    # --- the editor task ---

    async def _end(self, ending: Ending) -> None:
        if self._ending is None:
            self._ending = ending
            if ending.kind == "finish" and self._on_final_pending is not None:
                self._pending_watch = asyncio.get_running_loop().create_task(self._watch_final())
        self._ending_requested.set()
        if self._task is None or (self._task.done() and not self._delivered):
            if self._task is not None and ending.kind == "interrupt":
                self._ending = ending
            self._task = self._new_task()
        # Waiting this way, a cancelled caller leaves the (bounded) delivery running.
        await asyncio.wait({self._task})
        if not self._task.cancelled():
            self._task.result()

    def _new_task(self) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(self._run(), context=answer_context(since=self._since))

    async def _run(self) -> None:
        try:
            await self._stream()
        except Exception:
            logger.exception("streaming updates failed; waiting to deliver the final text")
        await self._ending_requested.wait()
        assert self._ending is not None
        await self._deliver_final(self._ending)

    async def _stream(self) -> None:
        failures = 0
        # The first message goes out with the first text, or with the placeholder (and any status
        # line) once the text is late: one call where a placeholder would have cost a post and an edit.
        if not await unless_set(self._first_text_or_late(), self._ending_requested):
            return
        due = True
        while not self._ending_requested.is_set():
            if not due and not await unless_set(self._changed.wait(), self._ending_requested):
                return
            due = False
            wait_s = self._slots[-1].next_send_at - self._clock.now()
            if wait_s > 0 and not await unless_set(self._clock.sleep(wait_s), self._ending_requested):
                return
            self._changed.clear()
            outcome = await self._send_update()
            if outcome == "sent":
                failures = 0
            else:
                due = True  # retry even if no new text comes
                if outcome == "failed":
                    failures += 1
                    backoff_s = self._limits.backoff_s(failures)
                    self._slots[-1].next_send_at = self._clock.now() + backoff_s

    async def _first_text_or_late(self) -> None:
        delay_s = self._limits.placeholder_after_s
        if self._wrote.is_set() or delay_s <= 0:
            return
        if await self._wrote_within(delay_s) or not self._sign_shown():
            return
        await self._wrote_within(max(0.0, self._limits.signed_placeholder_after_s - delay_s))

    async def _wrote_within(self, seconds: float) -> bool:
        wrote = asyncio.ensure_future(self._wrote.wait())
        late = asyncio.ensure_future(self._clock.sleep(seconds))
        try:
            await asyncio.wait({wrote, late}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            wrote.cancel()
            late.cancel()
        return self._wrote.is_set()

    async def _send_update(self) -> SendOutcome:
        """Sends the latest text to the current message once (rolling over first if needed)."""
        await self._roll_over(self._snapshot())
        slot = self._slots[-1]
        if self._layout.live_text(self._text, self._status) == slot.shown:
            return "sent"
        posting = slot.message_id is None
        has_text = self._layout.has_text(self._text)
        if posting or (has_text and not slot.has_text):
            priority = Priority.FIRST
        else:
            priority = Priority.INTERMEDIATE
        budget = self._post_budget if posting else self._edit_budget
        # An answer that ends while this waits is promoted to a final, and its token goes to the
        # final text: one call instead of a text with a cursor and then the final.
        # A later message of an answer whose reader already sees text queues from now, behind the answers
        # that show nothing yet, as before; every other call keeps its answer's age.
        later_part = posting and any(earlier.has_text for earlier in self._slots[:-1])
        with metrics.waiting_for_budget(observe.current_platform()), (
            queued_from(self._clock.now()) if later_part else nullcontext()
        ):
            await budget.acquire(
                priority, self._key, shows_text=slot.has_text, promote=self._ending_requested
            )
        if self._ending_requested.is_set():
            self._prepaid.hold(budget)
            return "sent"  # the final delivery takes over
        # Send the latest text: whatever arrived while waiting for the token comes along.
        text = self._snapshot()
        if self._layout.needs_roll_over(text, self._status):
            self._changed.set()
            return "sent"
        live = self._layout.live_text(text, self._status)
        has_text = self._layout.has_text(text)
        try:
            if slot.message_id is None:
                await self._messages.post(slot, live)
            else:
                await self._messages.edit(slot, live)
        except RateLimited as exc:
            budget.penalize(exc.retry_after_s, wide=exc.wide)
            return "rate_limited"
        except TransientSendError as exc:
            logger.info("streaming update failed, will retry: %s", exc)
            return "failed"
        except Exception:
            logger.exception("streaming update failed")
            return "failed"
        slot.shown = live
        if has_text:
            now = self._clock.now()
            if not slot.has_text:
                slot.has_text, slot.text_since = True, now
            slot.next_send_at = now + self._limits.edit_interval_s(now - slot.text_since)
        return "sent"

    async def _roll_over(self, text: str) -> None:
        # Seal the current message with its final slice and move on, before it outgrows the limit.
        while self._layout.needs_roll_over(text, self._status):
            sealed = self._slots[-1]
            sealed.target = self._layout.seal(text, self._status)
            self._slots.append(Slot(index=len(self._slots)))
            await self._final.deliver(sealed)

    # --- the final text ---

    async def _deliver_final(self, ending: Ending) -> None:
        try:
            await self._deliver_final_targets(ending)
        finally:
            self._prepaid.release()
            if self._pending_watch is not None and self._delivered:
                self._pending_watch.cancel()
        if self._delivered and self._on_final_delivered is not None:
            try:
                await self._on_final_delivered(self.message_ids)
            except Exception:
                logger.exception("on_final_delivered failed")

    async def _deliver_final_targets(self, ending: Ending) -> None:
        # Laid out once: the slots added below would otherwise count as sealed text in a second layout.
        targets = self._final_texts = self._final_targets(ending, self._snapshot())
        delivered = True
        for index, target in enumerate(targets):
            if index == len(self._slots):
                self._slots.append(Slot(index=index))
            slot = self._slots[index]
            slot.target = target
            if slot.message_id is not None and slot.shown == target:
                continue
            if not await self._final.deliver(slot, shows_text=slot.has_text):
                delivered = False
                if slot.message_id is None:
                    break  # posting later parts now would put them out of order
        self._delivered = delivered

    def _final_targets(self, ending: Ending, text: str) -> list[str]:
        sealed = [slot.target or "" for slot in self._slots[:-1]]
        return self._layout.final_targets(ending, text, sealed=sealed, messages=len(self._slots))

    @property
    def final_pending(self) -> bool:
        """A final text is known but not yet delivered (it was handed to `on_final_pending`)."""
        return self._pending_told and not self._delivered

    async def _watch_final(self) -> None:
        await self._clock.sleep(FINAL_PENDING_AFTER_S)
        if not self._delivered:
            await self._final_pending()

    async def _final_pending(self) -> None:
        if self._pending_told or self._on_final_pending is None or self._ending is None:
            return
        if self._ending.kind != "finish":
            return  # only an answer's own text is worth keeping; notes and failures are not
        self._pending_told = True
        targets = self._final_texts or self._final_targets(self._ending, self._snapshot())
        parts = [
            (target, self._slots[index].message_id if index < len(self._slots) else None)
            for index, target in enumerate(targets)
        ]
        try:
            await self._on_final_pending(parts)
        except Exception:
            logger.exception("on_final_pending failed")

    # --- the answer's text ---

    def _snapshot(self) -> str:
        if self._pieces:
            self._text += "".join(self._pieces)
            self._pieces.clear()
        return self._text
