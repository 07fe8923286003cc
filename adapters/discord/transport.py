"""Discord calls: posting and editing in channels or through an /ask webhook (with the buttons an answer's messages carry), failures read by the shared rule, channel budgets."""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import discord

from adapters.streaming import Clock, Priority, RateBudget
from adapters.streaming.budget_map import BudgetMap, Shares
from adapters.streaming.send import send_paced

from .transport_http import guarded, watch_global_lock
from .transport_lookup import PostOnce

__all__ = ["guarded", "watch_global_lock"]

log = logging.getLogger(__name__)

T = TypeVar("T")
NO_PINGS = discord.AllowedMentions.none()
# Discord's per-channel message window; the budget spreads its calls over it.
DISCORD_WINDOW_S = 5.0
# The bot-wide budget stays this far under Discord's global limit: for the few calls discord.py makes itself (at start;
# none during a burst of answers, bench/scale.py lists every call) and for calls that reach Discord bunched closer than
# they were granted. 5 % was tried: four processes on two busy cores then drew global 429s in bench/scale.py.
GLOBAL_MARGIN = 0.1
# The bot-wide budget's burst: window-safe, every call of it comes out of the refill, which is what paces a burst of
# answers (C calls take (C - burst) / (allowed - burst) s), so a small one sends a burst fastest. Two calls are what a
# lone answer needs before its first text (its thread, then its message): it is not paced at all.
GLOBAL_BURST_CALLS = 2.0
NONCE_CHARS = 25


def channel_budget(*, calls_per_window: int, window_s: float, clock: Clock) -> RateBudget:
    """A bucket that never lets one window hold more than `calls_per_window` calls: a small burst
    now, the rest spread over the window."""
    burst = 1 if calls_per_window <= 2 else 2
    refill = max(calls_per_window - burst, 1) / window_s
    return RateBudget(capacity=burst, refill_per_s=refill, clock=clock)


def bot_key(token: str) -> str:
    """Which bot a token is, among the processes' shares: every process of one bot has its token (never stored)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:16]


class DiscordBudgets:
    """One budget per channel or thread, shared by every answer posting or editing there.

    A budget that nobody drew on for as long as it takes to refill completely is dropped: a new
    one would be in the same state, and a bot in many channels must not keep one per channel
    forever. One still held (an answer streaming there) is always the one handed out again.
    """

    def __init__(
        self, *, calls_per_window: int, window_s: float, clock: Clock, global_calls: int | None = None,
        global_window_s: float = 1.0, bot: str | None = None,
    ) -> None:
        self._bot = bot  # which bot (bot_key), among the processes' shares
        self._calls = calls_per_window
        self._window_s = window_s
        self._clock = clock
        # Discord's per-bot limit across every route: each channel's calls also count against it.
        self.global_budget: RateBudget | None = None
        if global_calls is not None:
            allowed = global_calls * (1 - GLOBAL_MARGIN)
            # Window-safe: burst plus a window's refill never exceeds what one window allows, at any share.
            self.global_budget = RateBudget(
                capacity=GLOBAL_BURST_CALLS, refill_per_s=max(allowed - GLOBAL_BURST_CALLS, 1.0) / global_window_s,
                clock=clock, window_s=global_window_s,
            )
        self._budgets: BudgetMap[int] = BudgetMap(self._new)
        self._shares: Shares | None = None

    def follow(self, shares: Shares) -> None:
        """The per-bot global budget takes this process's share of the bot among the live processes, changed on
        the heartbeat's beat (core/store/shares.py); each channel's stays whole."""
        budget = self.global_budget
        if budget is None or self._bot is None:
            return
        scope = f"discord:{self._bot}"
        self._shares = shares
        shares.follow(lambda: budget.set_share(shares.serve(scope)))
        budget.set_share(shares.serve(scope))

    def weigh(self, guilds: int) -> None:
        """This process runs shards with `guilds` guilds: the bot-wide budget is split among the processes in
        proportion (at least 1 each, for DMs and a guild about to arrive), since Discord routes each guild's events to
        one shard and a process's answers grow with its guilds."""
        if self._shares is not None and self._bot is not None:
            self._shares.weigh(f"discord:{self._bot}", max(1, guilds))

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


class MessageButtons:
    """One answer's buttons, for every transport that writes it (a channel, an /ask response, a private answer).

    While `stop` is set the first message posted carries it; once `feedback` is set (the final text is about to
    go) every post and edit of text carries 👍/👎 in its place, so the final texts bring their own buttons and no
    edit after them is needed. An edit with Stop unset drops it from the messages that still show it."""

    def __init__(self) -> None:
        self.stop: discord.ui.View | None = None
        self.feedback: discord.ui.View | None = None
        self.with_stop: set[str] = set()
        self.with_feedback: set[str] = set()

    def for_post(self) -> discord.ui.View | None:
        if self.feedback is not None:
            return self.feedback
        return self.stop if self.stop is not None and not self.with_stop else None

    def posted(self, message_id: str, view: discord.ui.View | None) -> None:
        if view is None:
            return
        (self.with_feedback if view is self.feedback else self.with_stop).add(message_id)

    def for_edit(self, message_id: str, text: str | None) -> dict[str, Any]:
        """The `view` field an edit of `message_id` sends, if any (none: the message keeps what it shows)."""
        if self.feedback is not None and text is not None:
            return {"view": self.feedback}
        if self.stop is None and message_id in self.with_stop:
            return {"view": None}
        return {}

    def edited(self, message_id: str, fields: dict[str, Any]) -> None:
        if "view" not in fields:
            return
        self.with_stop.discard(message_id)
        if fields["view"] is None:
            self.with_feedback.discard(message_id)
        else:
            self.with_feedback.add(message_id)

    def shown(self, message_id: str, view: discord.ui.View | None) -> None:
        """`view` was put on the message by itself (show_view)."""
        self.edited(message_id, {"view": view})


class ChannelTransport:
    """Streams into a channel, thread or DM: the first message optionally replies to the question,
    each rolled-over message replies to the one before."""

    def __init__(
        self, channel: discord.abc.Messageable, *, reply_to: int | None = None,
        attempted: dict[str, datetime] | None = None,
    ) -> None:
        self._channel = channel
        self._reply_to = reply_to
        # Parts another process tried to post (key → when): looked up before they are posted.
        self.attempted = attempted or {}
        self._once: dict[str, PostOnce] = {}
        self.buttons = MessageButtons()

    async def post(self, text: str, *, key: str | None = None) -> str:
        reference = None
        if self._reply_to is not None:
            channel_id = getattr(self._channel, "id", None)
            reference = discord.MessageReference(
                message_id=self._reply_to, channel_id=channel_id, fail_if_not_exists=False  # type: ignore[arg-type]
            )
        # With a nonce discord.py sets enforce_nonce: a second post of the part within Discord's few minutes
        # returns the first message; past them, the part is looked up after a reply that never came.
        view = self.buttons.for_post()
        once = self._once.get(key) if key is not None else None
        if key is not None and once is None:
            once = self._once[key] = PostOnce(self._channel, attempted_at=self.attempted.get(key), replies_to=self._reply_to)
        send = lambda: self._channel.send(  # noqa: E731
            text, reference=reference, allowed_mentions=NO_PINGS, nonce=part_nonce(key) if key else None,  # type: ignore[arg-type]
            **({"view": view} if view is not None else {}),
        )
        message = await (once(send, text=text) if once is not None else guarded(send()))
        if key is not None:
            self._once.pop(key, None)
        stale_view = view is None and bool(message.components)
        if message.content.strip() != text.strip() or stale_view:
            # An earlier attempt's message (found, or returned for its nonce) shows that attempt's text and buttons.
            await guarded(_partial_message(self._channel, message.id).edit(
                content=text, allowed_mentions=NO_PINGS, **({"view": None} if stale_view else {}),
            ))
        self._reply_to = message.id
        self.buttons.posted(str(message.id), view)
        return str(message.id)

    async def edit(self, message_id: str, text: str | None) -> None:
        """`text` None: only the Stop button is dropped (the message keeps its text)."""
        partial = _partial_message(self._channel, int(message_id))
        buttons = self.buttons.for_edit(message_id, text)
        content = {} if text is None else {"content": text}
        await guarded(partial.edit(**content, allowed_mentions=NO_PINGS, **buttons))
        self.buttons.edited(message_id, buttons)

    async def show_view(self, message_id: str, view: discord.ui.View | None) -> None:
        """Puts `view` on one of the answer's messages (the 👍/👎 under the final one), in place of any Stop button."""
        await guarded(_partial_message(self._channel, int(message_id)).edit(view=view, allowed_mentions=NO_PINGS))
        self.buttons.shown(message_id, view)


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
    followups take no nonce: a followup whose reply was lost is looked up in the channel by its text)."""

    def __init__(self, interaction: discord.Interaction) -> None:
        self._interaction = interaction
        self._original_id: str | None = None
        self._once: dict[str, PostOnce] = {}
        self.buttons = MessageButtons()  # on the original response

    async def post(self, text: str, *, key: str | None = None) -> str:
        if self._original_id is None:
            view = self.buttons.for_post()
            message = await guarded(self._interaction.edit_original_response(
                content=text, allowed_mentions=NO_PINGS, **({"view": view} if view is not None else {})
            ))
            self._original_id = str(message.id)
            self.buttons.posted(self._original_id, view)
            return self._original_id
        # A followup takes no nonce: after a reply that never came, the channel is read for it first.
        channel = self._interaction.channel
        once = self._once.get(key or text) if channel is not None else None
        if once is None and channel is not None:
            once = self._once[key or text] = PostOnce(channel)  # type: ignore[arg-type]
        try:
            send = lambda: self._interaction.followup.send(text, wait=True, allowed_mentions=NO_PINGS)  # noqa: E731
            followup = await (once(send, text=text) if once is not None else guarded(send()))
        except discord.HTTPException as exc:
            # Past the token's 15 minutes an overflow goes to the channel as a plain message.
            if exc.status not in (401, 404) or channel is None or once is None:
                raise
            log.info("interaction token no longer valid; posting the rest of the answer in the channel")
            followup = await once(lambda: channel.send(text, allowed_mentions=NO_PINGS), text=text)  # type: ignore[union-attr, arg-type]
        self._once.pop(key or text, None)
        if followup.content.strip() != text.strip():
            # An earlier attempt's followup, found in the channel, shows that attempt's text.
            await guarded(_partial_message(channel, followup.id).edit(content=text, allowed_mentions=NO_PINGS))  # type: ignore[arg-type]
        return str(followup.id)

    async def edit(self, message_id: str, text: str | None) -> None:
        """`text` None: only the Stop button is dropped."""
        # Only the original response carries buttons; a followup keeps what it shows.
        buttons = self.buttons.for_edit(message_id, text) if message_id == self._original_id else {}
        try:
            if message_id == self._original_id:
                await guarded(self._interaction.edit_original_response(
                    **({} if text is None else {"content": text}), allowed_mentions=NO_PINGS, **buttons,
                ))
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
                **({} if text is None else {"content": text}), allowed_mentions=NO_PINGS, **buttons,
            ))
        self.buttons.edited(message_id, buttons)

    async def show_view(self, message_id: str, view: discord.ui.View | None) -> None:
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
        self.buttons.shown(message_id, view)
