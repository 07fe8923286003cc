"""Streams one answer into platform messages from a background editor task: coalesced, paced,
split across messages, and always finished."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Literal, TypeVar

from core import metrics, observe

from .answer_place import QueueWait, answer_context, queued_from
from .fair_queue import Priority
from .rate_budget import RateBudget
from .clock import Clock, MonotonicClock
from .limits import StreamLimits
from .splitter import close_open_fence, fence_closer, fence_reopener, open_fence, split_parts
from .transport import LiveText, MessageTransport, RateLimited, TransientSendError, is_permanent

logger = logging.getLogger(__name__)

T = TypeVar("T")
OnMessagePosted = Callable[[str], Awaitable[None]]
OnFinalDelivered = Callable[[list[str]], Awaitable[None]]
# Told once, when a final text could not be delivered at the first try: its parts, each with the id
# of the message that shows (or will show) it, so the text can be kept safe until it arrives.
OnFinalPending = Callable[[list[tuple[str, str | None]]], Awaitable[None]]
# Asked before each post of a part once the final is kept (part index, when a post of it was last attempted
# without its outcome seen, epoch seconds, or None): records the attempt; False means the final was handed
# to another process, and this streamer must post nothing more.
OnPostAttempt = Callable[[int, float | None], Awaitable[bool]]
# Told before the first post of each message (its part index, the attempt's time, epoch seconds), so a record of it
# exists before the platform can make it: a process dying before it sees the reply leaves a message to look up.
OnPostIntent = Callable[[int, float], Awaitable[None]]
# Shown in a message left over when a corrected final text needs fewer messages than were used.
VACATED_MESSAGE_TEXT = "…"
# A permanent edit failure this many times in a row: the message is gone or frozen, so the
# final text goes into a new message instead.
EDIT_FAILURES_BEFORE_REPOST = 2
RATE_LIMITS_PER_LOG_LINE = 10
# A final not delivered this long (platform time) after the answer ended is reported pending, so it
# is kept safe while it waits (a spent or paused budget, a slow platform).
FINAL_PENDING_AFTER_S = 2.0

SendOutcome = Literal["sent", "rate_limited", "failed"]


@dataclass(kw_only=True)
class _Slot:
    """One platform message of the answer."""

    message_id: str | None = None
    shown: str | None = None  # the last text the platform accepted
    target: str | None = None  # the text it must end with, once known
    has_text: bool = False  # it has shown answer text, not only the placeholder
    text_since: float = 0.0  # when it first showed answer text
    next_send_at: float = float("-inf")
    attempted_at: float | None = None  # a post was sent and its outcome not seen (epoch seconds)


@dataclass(frozen=True, kw_only=True)
class _Ending:
    kind: Literal["finish", "fail", "interrupt"]
    text: str | None


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
    ) -> None:
        self._transport = transport
        self._limits = limits
        self._edit_budget = edit_budget
        self._post_budget = post_budget
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._key: Hashable = key if key is not None else id(self)
        # The answer's age orders its calls in every budget queue, those its transport makes too (answer_context).
        self._since = self._clock.now()
        self._on_message_posted = on_message_posted
        self._on_final_delivered = on_final_delivered
        self._on_final_pending = on_final_pending
        self._final_texts: list[str] | None = None  # the final's parts, once its delivery laid them out
        self._on_post_attempt = on_post_attempt
        self._on_post_intent = on_post_intent
        self._handed_over = False
        self._idempotency_key = idempotency_key
        self._pending_told = False
        self._pending_watch: asyncio.Task[None] | None = None
        self._pieces: list[str] = []
        self._text = ""
        self._base = 0  # where the current (last) message's text starts in the answer
        self._fence: str | None = None  # code block open where the current message starts
        self._status: str | None = None
        self._slots: list[_Slot] = [_Slot()]
        self._changed = asyncio.Event()
        self._wrote = asyncio.Event()  # answer text (not only whitespace) has been appended
        self._ending_requested = asyncio.Event()
        self._ending: _Ending | None = None
        self._delivered = False
        # A token granted to a streaming update after the answer ended: the final spends it.
        self._prepaid: RateBudget | None = None
        self._task: asyncio.Task[None] | None = None

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
        await self._end(_Ending(kind="finish", text=final_text))
        return self.message_ids

    async def fail(self, message: str) -> None:
        """Replaces the answer in the current message with `message`, delivered like a final."""
        await self._end(_Ending(kind="fail", text=message))

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
        self._handed_over = True
        for task in (self._task, self._pending_watch):
            if task is not None and not task.done():
                task.cancel()

    async def interrupt(self, note: str) -> None:
        """Ends the answer with what was written so far plus `note` (shutdown, lost run).

        If an ending is already being delivered, waits for it instead; if that one gave up
        without delivering, the note is delivered in its place.
        """
        await self._end(_Ending(kind="interrupt", text=note))

    # --- the editor task ---

    async def _end(self, ending: _Ending) -> None:
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
        if not await self._unless_ending(self._first_text_or_late()):
            return
        due = True
        while not self._ending_requested.is_set():
            if not due and not await self._unless_ending(self._changed.wait()):
                return
            due = False
            wait_s = self._slots[-1].next_send_at - self._clock.now()
            if wait_s > 0 and not await self._unless_ending(self._clock.sleep(wait_s)):
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
        wrote = asyncio.ensure_future(self._wrote.wait())
        late = asyncio.ensure_future(self._clock.sleep(delay_s))
        try:
            await asyncio.wait({wrote, late}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            wrote.cancel()
            late.cancel()

    async def _send_update(self) -> SendOutcome:
        """Sends the latest text to the current message once (rolling over first if needed)."""
        await self._roll_over(self._snapshot())
        slot = self._slots[-1]
        if self._live_text(self._text) == slot.shown:
            return "sent"
        posting = slot.message_id is None
        has_text = bool(self._text[self._base :].strip())
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
            self._prepaid = budget
            return "sent"  # the final delivery takes over
        # Send the latest text: whatever arrived while waiting for the token comes along.
        text = self._snapshot()
        if self._needs_roll_over(text):
            self._changed.set()
            return "sent"
        live = self._live_text(text)
        has_text = bool(text[self._base :].strip())
        try:
            if slot.message_id is None:
                await self._post(slot, live)
            else:
                await self._call(self._transport.edit(slot.message_id, live))
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
        while self._needs_roll_over(text):
            room = self._limits.live_room(self._status)
            part = split_parts(text[self._base :], room, start_fence=self._fence, measure=self._limits.measure)[0]
            sealed = self._slots[-1]
            sealed.target = part.text
            self._base += len(part.body)
            self._fence = part.fence_after
            self._slots.append(_Slot())
            await self._deliver(sealed)

    # --- the final text ---

    async def _deliver_final(self, ending: _Ending) -> None:
        try:
            await self._deliver_final_targets(ending)
        finally:
            self._release_prepaid()
            if self._pending_watch is not None and self._delivered:
                self._pending_watch.cancel()
        if self._delivered and self._on_final_delivered is not None:
            try:
                await self._on_final_delivered(self.message_ids)
            except Exception:
                logger.exception("on_final_delivered failed")

    async def _deliver_final_targets(self, ending: _Ending) -> None:
        # Laid out once: the slots added below would otherwise count as sealed text in a second layout.
        targets = self._final_texts = self._final_targets(ending, self._snapshot())
        delivered = True
        for index, target in enumerate(targets):
            if index == len(self._slots):
                self._slots.append(_Slot())
            slot = self._slots[index]
            slot.target = target
            if slot.message_id is not None and slot.shown == target:
                continue
            if not await self._deliver(slot, shows_text=slot.has_text):
                delivered = False
                if slot.message_id is None:
                    break  # posting later parts now would put them out of order
        self._delivered = delivered

    def _final_targets(self, ending: _Ending, text: str) -> list[str]:
        sealed = [slot.target or "" for slot in self._slots[:-1]]
        reopen = "" if self._fence is None else fence_reopener(self._fence)
        if ending.kind == "finish":
            final = text if ending.text is None else ending.text
            if final.startswith(text[: self._base]):
                rest = final[self._base :]
                parts = split_parts(
                    rest, self._limits.max_chars, start_fence=self._fence, measure=self._limits.measure
                )
                targets = sealed + [part.text for part in parts]
            else:
                # A corrected answer that changes text already sealed: lay it out afresh.
                targets = _texts(final, self._limits)
        elif ending.kind == "fail":
            targets = sealed + _texts(ending.text or "", self._limits)
        else:
            shown = reopen + text[self._base :]
            note = ending.text or ""
            if shown.strip():
                note = close_open_fence(shown).rstrip() + "\n\n" + note
            targets = sealed + _texts(note, self._limits)
        targets = [target if target.strip() else self._limits.empty_text for target in targets]
        targets += [VACATED_MESSAGE_TEXT] * (len(self._slots) - len(targets))
        return targets

    async def _deliver(self, slot: _Slot, *, shows_text: bool = False) -> bool:
        """Sends `slot.target` until it arrives: a 429 waits its Retry-After and a transient failure backs
        off (capped), however often, while the bot runs; only `max_final_attempts` permanent failures
        (the channel is gone, the bot was removed) end it, with a log line.

        `shows_text`: the message shows answer text already, so finals that are other answers'
        first texts may go ahead (within the budget's bound)."""
        text = slot.target or self._limits.empty_text
        failures = edit_failures = rate_limited = transient = 0
        while True:
            posting = slot.message_id is None
            budget = self._post_budget if posting else self._edit_budget
            if self._prepaid is budget:
                self._prepaid = None
            else:
                self._release_prepaid()
                if not budget.try_acquire(Priority.FINAL, shows_text=shows_text):
                    # The final must wait (its budget is spent or paused by a 429): keep it safe meanwhile.
                    await self._final_pending()
                    with metrics.waiting_for_budget(observe.current_platform()):
                        await budget.acquire(Priority.FINAL, self._key, shows_text=shows_text)
            try:
                if posting and not await self._may_post(slot):
                    budget.release()
                    return False
                if posting:
                    await self._post(slot, text)
                else:
                    await self._call(self._transport.edit(slot.message_id, text))
                slot.shown = text
                return True
            except RateLimited as exc:
                # The budget's pause is the wait; the next acquire honours it. A 429 is "later", never "no".
                budget.penalize(exc.retry_after_s, wide=exc.wide)
                rate_limited += 1
                await self._final_pending()
                if rate_limited % RATE_LIMITS_PER_LOG_LINE == 0:
                    logger.warning("final text still rate limited after %d tries; waiting as told", rate_limited)
                continue
            except Exception as exc:
                if not is_permanent(exc):
                    # A 5xx, a dropped connection, an error nobody documented as final: "later", however often.
                    transient += 1
                    log = logger.info if isinstance(exc, TransientSendError) else logger.warning
                    log("final text not delivered yet (attempt %d): %r", transient, exc)
                    await self._final_pending()
                    await self._clock.sleep(self._limits.backoff_s(transient))
                    continue
                failures += 1
                logger.exception("final text not delivered (attempt %d)", failures)
                if not posting:
                    edit_failures += 1
                    if edit_failures >= EDIT_FAILURES_BEFORE_REPOST:
                        slot.message_id = None
            if failures >= self._limits.max_final_attempts:
                logger.error(
                    "gave up delivering a final text after %d permanent failures (and %d rate limits, %d transient)",
                    failures,
                    rate_limited,
                    transient,
                )
                return False
            await self._clock.sleep(self._limits.backoff_s(failures))

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

    # --- helpers ---

    def _release_prepaid(self) -> None:
        if self._prepaid is not None:
            self._prepaid.release()
            self._prepaid = None

    def _snapshot(self) -> str:
        if self._pieces:
            self._text += "".join(self._pieces)
            self._pieces.clear()
        return self._text

    def _needs_roll_over(self, text: str) -> bool:
        reopen = "" if self._fence is None else fence_reopener(self._fence)
        room = self._limits.live_room(self._status)
        if len(reopen) + len(text) - self._base > room:
            return True
        return self._limits.measure(reopen + text[self._base :]) > room

    def _live_text(self, text: str) -> LiveText:
        body = text[self._base :]
        shown_body = (("" if self._fence is None else fence_reopener(self._fence)) + body) if body.strip() else ""
        return LiveText(self._decorated(text), body=shown_body, status=self._status)

    def _decorated(self, text: str) -> str:
        body = text[self._base :]
        if body.strip():
            live = ("" if self._fence is None else fence_reopener(self._fence)) + body
            if open_fence(live) is not None:
                # Close the block for display, so the cursor is not shown as code.
                live += fence_closer(live) + "\n" + self._limits.cursor.strip()
            else:
                live += self._limits.cursor
        else:
            live = self._limits.placeholder
        if self._status:
            live += "\n" + self._status
        return live

    async def _may_post(self, slot: _Slot) -> bool:
        """Once the final is kept, each post is recorded first, and only while this process still owns it."""
        if self._handed_over:
            return False
        if not self._pending_told or self._on_post_attempt is None:
            return True
        try:
            owned = await self._on_post_attempt(self._slots.index(slot), slot.attempted_at)
        except Exception:
            # Unrecorded, a post could be repeated by whoever delivers next: not now (the loop retries).
            logger.exception("could not record a post attempt; trying again")
            raise TransientSendError("post attempt not recorded") from None
        if not owned:
            logger.info("the final was handed to another process; this one posts nothing more")
            self._handed_over = True
        return owned

    async def _post(self, slot: _Slot, text: str) -> None:
        key = None if self._idempotency_key is None else f"{self._idempotency_key}:{self._slots.index(slot)}"
        first = slot.attempted_at is None
        slot.attempted_at = slot.attempted_at or time.time()
        if first and self._on_post_intent is not None:
            try:
                await self._on_post_intent(self._slots.index(slot), slot.attempted_at)
            except Exception:
                # The post goes anyway: an answer is worth more than its crash repair.
                logger.exception("on_post_intent failed")
        try:
            slot.message_id = await self._call(self._transport.post(text, key=key))
        except RateLimited:
            if first:
                slot.attempted_at = None  # nothing was posted (an earlier unseen attempt would stay recorded)
            raise
        slot.attempted_at = None
        if self._on_message_posted is not None:
            try:
                await self._on_message_posted(slot.message_id)
            except Exception:
                logger.exception("on_message_posted failed for message %s", slot.message_id)

    async def _call(self, call: Awaitable[T]) -> T:
        """Awaits a transport call, bounded by `call_timeout_s` on the streamer's clock. Time the call spends
        queued on a budget of its own (a transport that paces a fallback) is not counted: it keeps its place
        in that queue instead of being cut and asking again at the back."""
        wait = QueueWait(self._clock)
        if asyncio.iscoroutine(call):
            call_task: asyncio.Future[T] = asyncio.get_running_loop().create_task(
                call, context=answer_context(wait=wait)
            )
        else:
            call_task = asyncio.ensure_future(call)
        started_at = self._clock.now()
        try:
            while True:
                left_s = started_at + self._limits.call_timeout_s + wait.waited_s() - self._clock.now()
                if left_s <= 0:
                    break
                timer = asyncio.ensure_future(self._clock.sleep(left_s))
                try:
                    await asyncio.wait({call_task, timer}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    timer.cancel()
                if call_task.done():
                    break
        except BaseException:
            call_task.cancel()
            raise
        if not call_task.done():
            call_task.cancel()
            raise TransientSendError(f"no answer within {self._limits.call_timeout_s:g} s")
        return call_task.result()

    async def _unless_ending(self, waiting: Awaitable[object]) -> bool:
        """Awaits `waiting` unless an ending is requested first; True when it completed."""
        work = asyncio.ensure_future(waiting)
        ending = asyncio.ensure_future(self._ending_requested.wait())
        try:
            await asyncio.wait({work, ending}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            work.cancel()
            raise
        finally:
            ending.cancel()
        if not work.done():
            work.cancel()
            return False
        work.result()
        return True


def _texts(text: str, limits: StreamLimits) -> list[str]:
    return [part.text for part in split_parts(text, limits.max_chars, measure=limits.measure)]
