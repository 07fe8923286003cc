"""Delivering one message's final text until it arrives: a 429 waits as told, a transient failure backs off, only repeated permanent failures give up."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

from core import metrics, observe

from .clock import Clock
from .fair_queue import Priority
from .limits import StreamLimits
from .part_messages import PartMessages, Slot
from .rate_budget import RateBudget
from .transport import PermanentSendError, RateLimited, TransientSendError, is_permanent

# The editor task's lines keep the streamer's logger whichever step writes them (log filters name it).
logger = logging.getLogger("adapters.streaming.streamer")

# A permanent edit failure this many times in a row: the message is gone or frozen, so the
# final text goes into a new message instead.
EDIT_FAILURES_BEFORE_REPOST = 2
RATE_LIMITS_PER_LOG_LINE = 10


class Prepaid:
    """A token granted to a streaming update after the answer ended: the final spends it."""

    def __init__(self) -> None:
        self._budget: RateBudget | None = None

    def hold(self, budget: RateBudget) -> None:
        self._budget = budget

    def spend(self, budget: RateBudget) -> bool:
        """True when the token held is `budget`'s (it is spent now); a token of another budget is given back."""
        if self._budget is budget:
            self._budget = None
            return True
        self.release()
        return False

    def release(self) -> None:
        if self._budget is not None:
            self._budget.release()
            self._budget = None


@dataclass
class _Tries:
    permanent: int = 0
    edit_permanent: int = 0
    rate_limited: int = 0
    transient: int = 0


class FinalDelivery:
    """Sends final texts into the answer's messages, each until it arrives (while the bot runs)."""

    def __init__(
        self, messages: PartMessages, *, post_budget: RateBudget, edit_budget: RateBudget, limits: StreamLimits,
        clock: Clock, key: Hashable, prepaid: Prepaid, waiting: Callable[[], Awaitable[None]],
        kept: Callable[[], bool],
    ) -> None:
        self._messages = messages
        self._post_budget = post_budget
        self._edit_budget = edit_budget
        self._limits = limits
        self._clock = clock
        self._key = key
        self._prepaid = prepaid
        self._waiting = waiting  # told whenever the final must wait: it is kept safe meanwhile
        self._kept = kept  # whether it was kept (each post is then recorded first)

    async def deliver(self, slot: Slot, *, shows_text: bool = False) -> bool:
        """Sends `slot.target` until it arrives: a 429 waits its Retry-After and a transient failure backs
        off (capped), however often, while the bot runs; only `max_final_attempts` permanent failures
        (the channel is gone, the bot was removed) end it, with a log line.

        `shows_text`: the message shows answer text already, so finals that are other answers'
        first texts may go ahead (within the budget's bound)."""
        text = slot.target or self._limits.empty_text
        tries = _Tries()
        while True:
            posting = slot.message_id is None
            budget = await self._token(posting, shows_text=shows_text)
            try:
                if posting and not await self._messages.may_post(slot, kept=self._kept()):
                    budget.release()
                    return False
                await (self._messages.post(slot, text) if posting else self._messages.edit(slot, text))
                slot.shown = text
                return True
            except RateLimited as exc:
                # The budget's pause is the wait; the next acquire honours it. A 429 is "later", never "no".
                budget.penalize(exc.retry_after_s, wide=exc.wide)
                await self._rate_limited(tries)
                continue
            except Exception as exc:
                if not is_permanent(exc):
                    await self._transient(tries, exc)
                    continue
                if isinstance(exc, PermanentSendError) and exc.team_wide:
                    # No call to that workspace or bot can go (uninstalled, its token revoked): no later try would.
                    logger.error("final text not delivered: the platform refuses every call of its workspace (%s)", exc)
                    return False
                self._permanent(slot, tries, posting=posting)
            if tries.permanent >= self._limits.max_final_attempts:
                logger.error(
                    "gave up delivering a final text after %d permanent failures (and %d rate limits, %d transient)",
                    tries.permanent, tries.rate_limited, tries.transient,
                )
                return False
            await self._clock.sleep(self._limits.backoff_s(tries.permanent))

    async def _token(self, posting: bool, *, shows_text: bool) -> RateBudget:
        """The budget of this try, its token taken: the prepaid one, else one now, else after waiting for it."""
        budget = self._post_budget if posting else self._edit_budget
        if not self._prepaid.spend(budget) and not budget.try_acquire(Priority.FINAL, shows_text=shows_text):
            # The final must wait (its budget is spent or paused by a 429): keep it safe meanwhile.
            await self._waiting()
            with metrics.waiting_for_budget(observe.current_platform()):
                await budget.acquire(Priority.FINAL, self._key, shows_text=shows_text)
        return budget

    async def _rate_limited(self, tries: _Tries) -> None:
        tries.rate_limited += 1
        await self._waiting()
        if tries.rate_limited % RATE_LIMITS_PER_LOG_LINE == 0:
            logger.warning("final text still rate limited after %d tries; waiting as told", tries.rate_limited)

    async def _transient(self, tries: _Tries, exc: Exception) -> None:
        # A 5xx, a dropped connection, an error nobody documented as final: "later", however often.
        tries.transient += 1
        log = logger.info if isinstance(exc, TransientSendError) else logger.warning
        log("final text not delivered yet (attempt %d): %r", tries.transient, exc)
        await self._waiting()
        await self._clock.sleep(self._limits.backoff_s(tries.transient))

    def _permanent(self, slot: Slot, tries: _Tries, *, posting: bool) -> None:
        """Called while handling the failure, so its log line carries the traceback."""
        tries.permanent += 1
        logger.exception("final text not delivered (attempt %d)", tries.permanent)
        if not posting:
            tries.edit_permanent += 1
            if tries.edit_permanent >= EDIT_FAILURES_BEFORE_REPOST:
                slot.message_id = None
