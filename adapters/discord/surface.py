"""Discord's end of one answer for the shared AnswerRunner: its messages, typing, approval, sources and notices."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Protocol

import discord

from adapters.answers import AnswerPlace, Pacing, post_intent_of
from adapters.streaming import Clock, MessageTransport, RateBudget, StreamLimits
from adapters.streaming.answer_place import asked_at
from core.approvals import ApprovalView
from core.citations import Citation
from core.ports import LiveMessage, PendingFinal

from . import buttons, render
from .controls import stop_view
from .feedback import feedback_view
from . import transport_calls as calls
from .transport import (NO_PINGS, ChannelTransport, DiscordBudgets, InteractionTransport, MessageButtons, fresh_nonce,
                        send_after_answers, send_reliably)
from .transport_lookup import find_posted

log = logging.getLogger(__name__)

PLATFORM = "discord"


class ButtonedTransport(MessageTransport, Protocol):
    """An answer's transport (ChannelTransport, InteractionTransport, PrivateTransport): its messages carry the
    answer's `buttons` (adapters/discord/message_buttons.py)."""

    buttons: MessageButtons

    async def edit(self, message_id: str, text: str | None) -> None: ...

    async def show_view(self, message_id: str, view: discord.ui.View | None) -> None: ...


class DiscordSurface:
    """Implements adapters.answers.Surface for one answer in a channel, thread or DM; every call draws on that channel's budget."""

    def __init__(
        self,
        *,
        transport: ButtonedTransport,
        channel: discord.abc.Messageable,
        channel_id: int,
        workspace: str,
        thread: str,
        budgets: DiscordBudgets,
        limits: StreamLimits,
        clock: Clock,
        show_typing: bool,
        background: set[asyncio.Task[None]],
        feedback: bool = False,
        asked_epoch_s: float | None = None,
    ) -> None:
        self._transport = transport
        self._feedback = feedback
        self._channel = channel
        self._channel_id = channel_id
        self._budget = budgets(channel_id)
        self._budgets_global = budgets.global_budget
        self._clock = clock
        self._show_typing = show_typing
        self._background = background
        self.place = AnswerPlace(platform=PLATFORM, workspace=workspace, channel=str(channel_id), thread=thread)
        # Creates and edits share the channel's one budget: Discord counts them together.
        # Nothing is posted before the first event, so a silent model spends none of it.
        # Its calls queue by when the question was asked (a burst read in any order keeps who asked first).
        self.pacing = Pacing(
            limits=limits, edit_budget=self._budget, post_budget=self._budget, clock=clock, start_on_first_event=True,
            since=asked_at(clock, asked_epoch_s, time_scale=getattr(clock, "time_scale", 1.0)),
        )

    async def show_working(self) -> None:
        # Typing costs no message call; not awaited, so the answer never waits for it.
        if not self._show_typing:
            return
        # Only when the bot-wide budget has a call to spare: typing is a courtesy, the answer is not.
        global_budget = self._budgets_global
        if global_budget is not None and not global_budget.try_acquire():
            return
        task = asyncio.create_task(_typing(self._channel))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def post(self, text: str, *, key: str | None = None) -> str:
        """A new message of the answer: in the channel, or through the /ask interaction's webhook."""
        return await self._transport.post(text, key=key)

    async def edit(self, message_id: str, text: str) -> None:
        await self._transport.edit(message_id, text)

    # AnswerControls (adapters/answer_protocols.py): Stop rides the answer's first message as a component.
    async def show_stop(self, run_id: str) -> None:
        self._transport.buttons.stop = stop_view(run_id)

    async def end_stop(self) -> None:
        self._transport.buttons.stop = None

    async def clear_stop(self) -> None:
        """Messages the final edit did not touch (an earlier part of a long answer) lose the button here."""
        transport = self._transport
        for message_id in list(transport.buttons.with_stop):
            await send_reliably(self._budget, lambda: transport.edit(message_id, None), clock=self._clock)

    async def will_finish(self, run_id: str) -> None:
        """The final texts carry 👍/👎 in place of Stop: no edit after them for the buttons."""
        if self._feedback:
            self._transport.buttons.feedback = feedback_view(run_id)

    async def show_feedback(self, run_id: str, answer_ids: list[str]) -> None:
        """👍/👎 stay on the answer's last message only: an edit for a final laid over several messages, or one
        whose last message was not written again; cosmetic, so behind every answer's texts."""
        if not self._feedback or not answer_ids:
            return
        buttons, show = self._transport.buttons, self._transport.show_view
        last = answer_ids[-1]
        for message_id in sorted(buttons.with_feedback - {last}):
            await send_after_answers(self._budget, lambda m=message_id: show(m, None), clock=self._clock)
        if last not in buttons.with_feedback:
            await send_after_answers(self._budget, lambda: show(last, feedback_view(run_id)), clock=self._clock)

    async def show_approval(self, view: ApprovalView) -> dict[str, Any]:
        """One message per part of the calls, each with its own buttons, so every call is shown where it
        is decided; the reference names them all (`parts` beyond the first) for expiry to edit."""
        posted: list[tuple[render.ApprovalPart, discord.Message]] = []
        try:
            for part in render.approval_parts(view.calls):
                content = render.approval_text(view, part)
                components = buttons.approval_view(view, part)
                message = await calls.post_message(
                    self._channel, budget=self._budget, clock=self._clock, nonce=fresh_nonce(),
                    content=content, view=components, allowed_mentions=NO_PINGS,
                )
                posted.append((part, message))
        except Exception:
            # The run is withdrawn when its request cannot be shown whole: no part of it stays clickable.
            for _, message in posted:
                await _delete_quietly(message)
            raise
        (first_part, first), *others = posted
        ref: dict[str, Any] = {
            "platform": PLATFORM, "channel_id": str(self._channel_id), "message_id": str(first.id),
            "first": first_part.first, "count": first_part.count,
        }
        if others:
            ref["parts"] = [
                {"message_id": str(message.id), "first": part.first, "count": part.count} for part, message in others
            ]
        return ref

    async def show_sources(self, citations: tuple[Citation, ...], answer_ids: list[str]) -> None:
        embed = render.sources_embed(citations)
        if embed is None:
            return
        reference = None
        if answer_ids:
            reference = discord.MessageReference(
                message_id=int(answer_ids[-1]), channel_id=self._channel_id, fail_if_not_exists=False
            )
        # An embed has no text to be known by: the sources are the bot's embed replying to the answer.
        replies_to = int(answer_ids[-1]) if answer_ids else None
        await calls.post_message(
            self._channel, budget=self._budget, clock=self._clock, nonce=fresh_nonce(),
            matches=lambda message: bool(message.embeds) and (
                replies_to is None or getattr(message.reference, "message_id", None) == replies_to
            ),
            embed=embed, reference=reference, allowed_mentions=NO_PINGS,
        )

    async def show_notice(self, text: str) -> None:
        await calls.post_message(
            self._channel, budget=self._budget, clock=self._clock, nonce=fresh_nonce(), content=text,
            allowed_mentions=NO_PINGS,
        )


async def edit_approval(
    message: discord.Message | discord.PartialMessage, view: ApprovalView, part: render.ApprovalPart, *,
    budget: RateBudget, clock: Clock,
) -> None:
    """Redraws one approval message (its part of the calls) as `view` stands now."""
    content = render.approval_text(view, part)
    components = buttons.approval_view(view, part)
    await calls.update_message(message, budget=budget, clock=clock, content=content, view=components, allowed_mentions=NO_PINGS)


async def _delete_quietly(message: discord.Message) -> None:
    try:
        await calls.remove_message(message)
    except Exception:
        log.warning("could not delete approval message %s", message.id, exc_info=True)


async def _typing(channel: discord.abc.Messageable) -> None:
    try:
        await calls.show_typing(channel)
    except Exception:
        log.debug("could not show typing", exc_info=True)


class DiscordSurfaces:
    """Makes the surface of each answer; all of them share the channel budgets, stream limits and clock."""

    def __init__(self, *, budgets: DiscordBudgets, limits: StreamLimits, clock: Clock, feedback: bool = False) -> None:
        self.budgets = budgets
        self.feedback = feedback  # 👍/👎 under each final answer (FEEDBACK_BUTTONS)
        self.limits = limits
        self.clock = clock
        # Typing tasks are fire-and-forget; holding them keeps the loop from dropping them half-way.
        self._background: set[asyncio.Task[None]] = set()

    def in_channel(
        self, channel: discord.abc.Messageable, *, channel_id: int, workspace: str, thread: str = "",
        reply_to: int | None = None, asked_epoch_s: float | None = None,
    ) -> DiscordSurface:
        """An answer posted as messages in a channel, thread or DM, the first replying to `reply_to`; its calls
        queue from `asked_epoch_s`, when its question was asked (epoch seconds), if recent."""
        return self._surface(
            ChannelTransport(channel, reply_to=reply_to), channel, channel_id=channel_id, workspace=workspace,
            thread=thread, show_typing=True, asked_epoch_s=asked_epoch_s,
        )

    def for_interaction(self, interaction: discord.Interaction, *, workspace: str, thread: str) -> DiscordSurface:
        """An /ask answer: the deferred response, then followups; approvals and sources go to its channel."""
        # A deferred /ask already shows "thinking…": a typing indicator would say it twice.
        return self._surface(
            InteractionTransport(interaction), interaction.channel,  # type: ignore[arg-type]
            channel_id=interaction.channel_id or 0, workspace=workspace, thread=thread, show_typing=False,
        )

    def _surface(
        self, transport: ButtonedTransport, channel: discord.abc.Messageable, *, channel_id: int, workspace: str,
        thread: str, show_typing: bool, asked_epoch_s: float | None = None,
    ) -> DiscordSurface:
        return DiscordSurface(
            transport=transport, channel=channel, channel_id=channel_id, workspace=workspace, thread=thread,
            budgets=self.budgets, limits=self.limits, clock=self.clock, show_typing=show_typing,
            background=self._background, feedback=self.feedback, asked_epoch_s=asked_epoch_s,
        )


class DiscordShownMessages:
    """Implements adapters.answers.ShownMessages: answers a dead process left streaming, read back and rewritten."""

    max_chars = render.MAX_CONTENT_CHARS

    def __init__(self, client: discord.Client, budgets: DiscordBudgets, clock: Clock) -> None:
        self._client = client
        self._budgets = budgets
        self._clock = clock

    def render(self, markdown: str) -> str:
        # Discord shows Markdown as written.
        return markdown

    async def read_shown(self, message: LiveMessage) -> str | None:
        return (await calls.read_message(self._message(message))).content

    async def replace_shown(self, message: LiveMessage, text: str) -> None:
        await calls.update_message(
            self._message(message), budget=self._budgets(int(message.channel)), clock=self._clock, content=text,
            allowed_mentions=NO_PINGS,
        )

    async def find_post(self, message: LiveMessage, key: str, *, since: float) -> str | None:
        """Implements adapters.answers.PostFinder: the message a post of `key` attempted at `since` made, or None.

        Discord gives no nonce back, so the message is known by what its intent recorded: a later part is the bot's
        message replying to the part before it (each rolled-over message does), whatever it shows; the first is
        the bot's message showing the answer's start, or still streaming (the cursor, or the placeholder), and an
        answer given in place ("msg-<id>") replies to that question with it. Nothing else is taken: a message of
        another answer must not get this one's note."""
        cursor, placeholder = StreamLimits.cursor.strip(), StreamLimits.placeholder.strip()
        question = message.thread.removeprefix("msg-") if message.thread.startswith("msg-") else ""
        intent = post_intent_of(message.message_id)
        first = key.rpartition(":")[2] in ("", "0")
        after = intent.after if intent is not None else None
        head = (intent.head or "").strip() if intent is not None else ""

        def ours(found: discord.Message) -> bool:
            reference = str(getattr(found.reference, "message_id", "") or "")
            shown = found.content.strip()
            live = shown.endswith(cursor) or shown.startswith(placeholder)
            if after:
                # An interaction's followup replies to nothing: it is known by its cursor, as before.
                return reference == after or (not reference and live)
            if not (live or (first and bool(head) and shown.startswith(head))):
                return False
            return not (first and question) or reference == question

        channel = self._client.get_partial_messageable(int(message.channel))
        found = await send_reliably(
            self._budgets(int(message.channel)),
            lambda: find_posted(channel, since=datetime.fromtimestamp(since, timezone.utc), matches=ours),
            clock=self._clock,
        )
        return None if found is None else str(found.id)

    def _message(self, message: LiveMessage) -> discord.PartialMessage:
        channel = self._client.get_partial_messageable(int(message.channel))
        return channel.get_partial_message(int(message.message_id))


class DiscordFinalDelivery:
    """Implements adapters.answers.FinalDelivery and PartFinder: a kept final's parts, posted with their nonce
    (Discord returns a part posted minutes ago instead of a second one) or edited in place; a part whose post
    was attempted without its outcome seen is looked for in the channel from the attempt on, since the nonce
    is forgotten after a few minutes."""

    def __init__(self, client: discord.Client, budgets: DiscordBudgets, clock: Clock) -> None:
        self._client = client
        self._budgets = budgets
        self._clock = clock

    async def post_part(self, final: PendingFinal, index: int, text: str) -> str:
        transport = ChannelTransport(self._client.get_partial_messageable(int(final.channel)))
        return await send_reliably(
            self._budgets(int(final.channel)), lambda: transport.post(text, key=f"{final.answer_id}:{index}"),
            clock=self._clock,
        )

    async def edit_part(self, final: PendingFinal, message_id: str, text: str) -> None:
        message = self._client.get_partial_messageable(int(final.channel)).get_partial_message(int(message_id))
        await calls.update_message(
            message, budget=self._budgets(int(final.channel)), clock=self._clock, content=text, allowed_mentions=NO_PINGS
        )

    async def find_part(self, final: PendingFinal, index: int, *, since: float) -> str | None:
        known = {part.message_id for part in final.parts if part.message_id}
        channel = self._client.get_partial_messageable(int(final.channel))
        shows = shows_part(final.parts[index].text)
        found = await send_reliably(
            self._budgets(int(final.channel)),
            lambda: find_posted(
                channel, since=datetime.fromtimestamp(since, timezone.utc),
                matches=lambda message: str(message.id) not in known and shows(message),
            ),
            clock=self._clock,
        )
        return None if found is None else str(found.id)


def shows_part(text: str, *, cursor: str = StreamLimits.cursor) -> Callable[[discord.Message], bool]:
    """A message showing part `text`, or the start of it as streamed (the text so far, then the cursor)."""
    wanted = text.strip()
    mark = cursor.strip()

    def matches(message: discord.Message) -> bool:
        shown = message.content.strip()
        if shown == wanted:
            return True
        head, cut, _ = shown.partition(mark)
        return bool(cut) and bool(head.strip()) and wanted.startswith(head.strip())

    return matches
