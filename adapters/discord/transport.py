"""Discord calls: posting and editing in channels or through an /ask webhook, failures read by the shared rule, channel budgets."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

import discord

from adapters.streaming import (
    CONNECTION_ERRORS,
    Clock,
    Priority,
    RateBudget,
    RateLimited,
    TransientSendError,
    classify_failure,
    parse_retry_after,
)
from adapters.streaming.rate_budget import BudgetMap
from adapters.streaming.send import send_paced

log = logging.getLogger(__name__)

T = TypeVar("T")
NO_PINGS = discord.AllowedMentions.none()
# Discord's per-channel message window; the budget spreads its calls over it.
DISCORD_WINDOW_S = 5.0
# The bot-wide budget stays this far under Discord's global limit, for calls discord.py makes itself.
GLOBAL_MARGIN = 0.1
NONCE_CHARS = 25
# Discord's global limit is per second: a global 429 asks for well under this.
GLOBAL_LOCK_REPAIR_S = 1.0
_watched_http: weakref.WeakSet[discord.http.HTTPClient] = weakref.WeakSet()


def watch_global_lock(http: discord.http.HTTPClient) -> None:
    """Lets `guarded` repair this client's global rate-limit lock after a cancelled call.

    discord.py clears the lock before sleeping out a global 429 and sets it again after; a request
    cancelled in that sleep (the streamer cancels an edit its ending overtakes) never sets it, and
    every later request of the bot would wait on it for good."""
    _watched_http.add(http)


def _repair_global_locks_soon() -> None:
    loop = asyncio.get_running_loop()
    for http in list(_watched_http):
        lock = getattr(http, "_global_over", None)
        if isinstance(lock, asyncio.Event) and not lock.is_set():
            # Set early at worst: a request sent during a real global limit gets a 429 and waits again.
            loop.call_later(GLOBAL_LOCK_REPAIR_S, lock.set)


async def guarded(call: Awaitable[T]) -> T:
    """Awaits a discord.py call, turning 429s into RateLimited and retryable failures into
    TransientSendError; other errors pass through as permanent."""
    try:
        return await call
    except asyncio.CancelledError:
        _repair_global_locks_soon()
        raise
    except discord.RateLimited as exc:
        raise RateLimited(exc.retry_after, "Discord rate limit") from exc
    except discord.HTTPException as exc:
        # Discord says a limit's scope: only a route's own ("user") limit leaves the bot-wide budget alone.
        scope = str(_header(exc, "X-RateLimit-Scope") or "").lower()
        wide = scope != "user" or str(_header(exc, "X-RateLimit-Global") or "").lower() == "true"
        failure = classify_failure(
            status=exc.status, retry_after_s=parse_retry_after(_header(exc, "Retry-After")),
            detail=f"Discord answered {exc.status}", wide=wide,
        )
        if failure is None:
            raise
        raise failure from exc
    except CONNECTION_ERRORS as exc:
        raise TransientSendError(f"Discord unreachable: {exc!r}") from exc


def _header(exc: discord.HTTPException, name: str) -> object:
    headers = getattr(exc.response, "headers", None)
    return headers.get(name) if headers is not None else None


def channel_budget(*, calls_per_window: int, window_s: float, clock: Clock) -> RateBudget:
    """A bucket that never lets one window hold more than `calls_per_window` calls: a small burst
    now, the rest spread over the window."""
    burst = 1 if calls_per_window <= 2 else 2
    refill = max(calls_per_window - burst, 1) / window_s
    return RateBudget(capacity=burst, refill_per_s=refill, clock=clock)


class ChannelBudgets:
    """One budget per channel or thread, shared by every answer posting or editing there.

    A budget that nobody drew on for as long as it takes to refill completely is dropped: a new
    one would be in the same state, and a bot in many channels must not keep one per channel
    forever. One still held (an answer streaming there) is always the one handed out again.
    """

    def __init__(
        self, *, calls_per_window: int, window_s: float, clock: Clock, global_calls: int | None = None,
        global_window_s: float = 1.0,
    ) -> None:
        self._calls = calls_per_window
        self._window_s = window_s
        self._clock = clock
        # Discord's per-bot limit across every route: each channel's calls also count against it.
        self.global_budget: RateBudget | None = None
        if global_calls is not None:
            allowed = global_calls * (1 - GLOBAL_MARGIN)
            # Window-safe: burst plus a window's refill never exceeds what one window allows.
            burst = max(1.0, allowed * 0.1)
            self.global_budget = RateBudget(
                capacity=burst, refill_per_s=max(allowed - burst, 1.0) / global_window_s, clock=clock
            )
        self._budgets: BudgetMap[int] = BudgetMap(self._new)

    def __call__(self, channel_id: int) -> RateBudget:
        return self._budgets(channel_id)

    def __len__(self) -> int:
        """Budgets kept (one dropped while an answer still holds it is not counted)."""
        return len(self._budgets)

    def bound_s(self, calls: int) -> float:
        """Least time `calls` calls can take on a fresh budget (the bench's bound)."""
        budget = channel_budget(calls_per_window=self._calls, window_s=self._window_s, clock=self._clock)
        return max(0.0, calls - budget.capacity) / budget.refill_per_s

    def _new(self, channel_id: int) -> RateBudget:
        template = channel_budget(calls_per_window=self._calls, window_s=self._window_s, clock=self._clock)
        return RateBudget(
            capacity=template.capacity, refill_per_s=template.refill_per_s, clock=self._clock, parent=self.global_budget,
        )


async def send_reliably(budget: RateBudget, make_call: Callable[[], Awaitable[T]], *, clock: Clock) -> T:
    """A one-off create or edit (approval, sources) on a channel's budget, retried on 429 and
    transient failures; the last failure is raised."""
    return await send_paced(lambda: guarded(make_call()), budget=budget, clock=clock)


async def send_after_answers(budget: RateBudget, make_call: Callable[[], Awaitable[T]], *, clock: Clock) -> T:
    """Like send_reliably, for a note only one person sees (a clicker's): it waits behind the channel's
    answers, so a burst of clicks never holds back the resumed answer everyone is waiting for."""
    return await send_paced(lambda: guarded(make_call()), budget=budget, clock=clock, priority=Priority.INTERMEDIATE)


class ChannelTransport:
    """Streams into a channel, thread or DM: the first message optionally replies to the question,
    each rolled-over message replies to the one before."""

    def __init__(self, channel: discord.abc.Messageable, *, reply_to: int | None = None) -> None:
        self._channel = channel
        self._reply_to = reply_to
        # The Stop button (adapters/discord/controls.py): on the first message posted while set; an edit
        # after it is unset drops it from the messages that carry it.
        self.controls: discord.ui.View | None = None
        self.controlled: set[str] = set()

    async def post(self, text: str, *, key: str | None = None) -> str:
        reference = None
        if self._reply_to is not None:
            channel_id = getattr(self._channel, "id", None)
            reference = discord.MessageReference(
                message_id=self._reply_to, channel_id=channel_id, fail_if_not_exists=False  # type: ignore[arg-type]
            )
        # With a nonce discord.py sets enforce_nonce: a second post of the part returns the first message.
        view = self.controls if self.controls is not None and not self.controlled else None
        message = await guarded(self._channel.send(
            text, reference=reference, allowed_mentions=NO_PINGS, nonce=part_nonce(key) if key else None,  # type: ignore[arg-type]
            **({"view": view} if view is not None else {}),
        ))
        self._reply_to = message.id
        if view is not None:
            self.controlled.add(str(message.id))
        return str(message.id)

    async def edit(self, message_id: str, text: str | None) -> None:
        """`text` None: only the Stop button is dropped (the message keeps its text)."""
        partial = _partial_message(self._channel, int(message_id))
        drop = self.controls is None and message_id in self.controlled
        content = {} if text is None else {"content": text}
        await guarded(partial.edit(**content, allowed_mentions=NO_PINGS, **({"view": None} if drop else {})))
        if drop:
            self.controlled.discard(message_id)

    async def show_view(self, message_id: str, view: discord.ui.View) -> None:
        """Puts `view` on one of the answer's messages (the 👍/👎 under the final one), in place of any Stop button."""
        await guarded(_partial_message(self._channel, int(message_id)).edit(view=view, allowed_mentions=NO_PINGS))
        self.controlled.discard(message_id)


def _partial_message(channel: discord.abc.Messageable, message_id: int) -> discord.PartialMessage:
    get = getattr(channel, "get_partial_message", None)
    if get is None:
        raise TypeError(f"cannot edit messages in {channel!r}")
    partial: discord.PartialMessage = get(message_id)
    return partial


def part_nonce(key: str) -> str:
    """A message nonce for an answer part (Discord allows 25 characters)."""
    return hashlib.sha256(key.encode()).hexdigest()[:NONCE_CHARS]


def fresh_nonce() -> str:
    """A nonce for one message that may be sent more than once (a retry after a lost response):
    discord.py then sets enforce_nonce, and Discord returns the first message instead of a second."""
    return uuid.uuid4().hex[:NONCE_CHARS]


class InteractionTransport:
    """Streams an /ask answer: the deferred original response first, overflow as followups (webhook
    followups take no nonce, so `key` is not used here)."""

    def __init__(self, interaction: discord.Interaction) -> None:
        self._interaction = interaction
        self._original_id: str | None = None
        # The Stop button, on the original response (as ChannelTransport.controls).
        self.controls: discord.ui.View | None = None
        self.controlled: set[str] = set()

    async def post(self, text: str, *, key: str | None = None) -> str:
        if self._original_id is None:
            view = self.controls
            message = await guarded(self._interaction.edit_original_response(
                content=text, allowed_mentions=NO_PINGS, **({"view": view} if view is not None else {})
            ))
            self._original_id = str(message.id)
            if view is not None:
                self.controlled.add(self._original_id)
            return self._original_id
        try:
            followup = await guarded(self._interaction.followup.send(text, wait=True, allowed_mentions=NO_PINGS))
        except discord.HTTPException as exc:
            # Past the token's 15 minutes an overflow goes to the channel as a plain message.
            if exc.status not in (401, 404) or self._interaction.channel is None:
                raise
            log.info("interaction token no longer valid; posting the rest of the answer in the channel")
            channel = self._interaction.channel
            followup = await guarded(channel.send(text, allowed_mentions=NO_PINGS))  # type: ignore[union-attr, arg-type]
        return str(followup.id)

    async def edit(self, message_id: str, text: str | None) -> None:
        """`text` None: only the Stop button is dropped."""
        drop = self.controls is None and message_id in self.controlled
        try:
            if message_id == self._original_id:
                await guarded(self._interaction.edit_original_response(
                    **({} if text is None else {"content": text}), allowed_mentions=NO_PINGS,
                    **({"view": None} if drop else {}),
                ))
                if drop:
                    self.controlled.discard(message_id)
            else:
                await guarded(
                    self._interaction.followup.edit_message(int(message_id), content=text, allowed_mentions=NO_PINGS)
                )
        except discord.HTTPException as exc:
            # The interaction token lasts 15 minutes; the bot can still edit its own message.
            if exc.status not in (401, 404) or self._interaction.channel is None:
                raise
            log.info("interaction token no longer valid; editing message %s directly", message_id)
            channel = self._interaction.channel
            await guarded(_partial_message(channel, int(message_id)).edit(  # type: ignore[arg-type]
                **({} if text is None else {"content": text}), allowed_mentions=NO_PINGS, **({"view": None} if drop else {}),
            ))
            if drop:
                self.controlled.discard(message_id)

    async def show_view(self, message_id: str, view: discord.ui.View) -> None:
        """Puts `view` on one of the answer's messages (the 👍/👎 under the final one), in place of any Stop button."""
        try:
            if message_id == self._original_id:
                await guarded(self._interaction.edit_original_response(view=view, allowed_mentions=NO_PINGS))
            else:
                await guarded(self._interaction.followup.edit_message(int(message_id), view=view, allowed_mentions=NO_PINGS))
        except discord.HTTPException as exc:
            if exc.status not in (401, 404) or self._interaction.channel is None:
                raise
            channel = self._interaction.channel
            await guarded(_partial_message(channel, int(message_id)).edit(view=view, allowed_mentions=NO_PINGS))  # type: ignore[arg-type]
        self.controlled.discard(message_id)
