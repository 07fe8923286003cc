"""Turns one engine event stream into Discord messages: streamed answer, approval request,
sources reply, failure text — with live-message bookkeeping for crashes and shutdown."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
import discord

from adapters import wording
from adapters.run_player import live_message_hooks, play_run
from adapters.streaming import Clock, MessageStreamer, MessageTransport, StreamLimits
from core import wording as core_wording
from core.engine import Engine
from core.events import ApprovalRequired, Event, SourceItem
from core.store.live_messages import LiveMessages

from . import rendering
from .approvals import approval_view, message_ref
from .sources import sources_embed
from .transport import NO_PINGS, ChannelBudgets, send_reliably

log = logging.getLogger(__name__)

PLATFORM = "discord"


@dataclass(frozen=True, kw_only=True)
class AnswerPlace:
    """Where one answer goes: its transport, and the channel for approvals and sources."""

    transport: MessageTransport
    channel: discord.abc.Messageable
    channel_id: int
    workspace: str  # guild id, or "@dm"
    thread: str = ""
    show_typing: bool = True  # False where Discord already shows "thinking…" (a deferred /ask)


@dataclass(kw_only=True, eq=False)
class _Answer:
    streamer: MessageStreamer
    interrupted: bool = False


class AnswerStreams:
    """Runs answers into Discord and remembers the ones still streaming."""

    def __init__(
        self, *, engine: Engine, live: LiveMessages, budgets: ChannelBudgets, limits: StreamLimits, clock: Clock
    ) -> None:
        self._engine = engine
        self._live = live
        self._budgets = budgets
        self._limits = limits
        self._clock = clock
        self._answers: set[_Answer] = set()
        self._background: set[asyncio.Task[None]] = set()

    @property
    def inflight(self) -> int:
        return len(self._answers)

    async def run(self, events: AsyncIterator[Event], place: AnswerPlace) -> None:
        """Consumes `events` to the end, always leaving the answer message in a final state."""
        budget = self._budgets(place.channel_id)
        remember, forget = live_message_hooks(
            self._live, platform=PLATFORM, workspace=place.workspace, channel=str(place.channel_id), thread=place.thread
        )
        streamer = MessageStreamer(
            place.transport,
            limits=self._limits,
            edit_budget=budget,
            post_budget=budget,
            clock=self._clock,
            key=object(),
            on_message_posted=remember,
        )
        answer = _Answer(streamer=streamer)
        self._answers.add(answer)
        if place.show_typing:
            # Typing costs no message call; the first message carries the first text.
            typing = asyncio.create_task(_typing(place.channel))
            self._background.add(typing)
            typing.add_done_callback(self._background.discard)
        try:
            # Started on the first event: no placeholder spends a call of the channel's budget
            # while the model has not said anything yet.
            await play_run(
                events, streamer, _DiscordSurface(self, place), start_on_first_event=True,
                stopped=lambda: answer.interrupted,
                withdraw_approval=self._engine.withdraw_approval,
            )
        except asyncio.CancelledError:
            if not answer.interrupted:
                await asyncio.shield(streamer.interrupt(wording.interrupted()))
            raise
        except Exception:
            log.exception("answer failed while streaming")
            if not answer.interrupted:
                await streamer.fail(wording.failed(core_wording.unexpected_error()))
        finally:
            self._answers.discard(answer)
            await asyncio.shield(forget(streamer.message_ids))

    async def _post_approval(self, event: ApprovalRequired, place: AnswerPlace) -> None:
        text = rendering.approval_text(calls=event.calls, requested_by=event.requested_by, expires_at=event.expires_at)
        view = approval_view(event.continuation_id, len(event.calls))
        budget = self._budgets(place.channel_id)
        message = await send_reliably(
            budget, lambda: place.channel.send(text, view=view, allowed_mentions=NO_PINGS), clock=self._clock
        )
        ref = message_ref(channel_id=place.channel_id, message_id=message.id, text=text, calls=len(event.calls))
        await self._engine.continuations.add_message_ref(uuid.UUID(event.continuation_id), ref)

    async def _post_sources(self, items: tuple[SourceItem, ...], place: AnswerPlace, *, reply_to: str | None) -> None:
        embed = sources_embed(items)
        if embed is None:
            return
        reference = None
        if reply_to is not None:
            reference = discord.MessageReference(
                message_id=int(reply_to), channel_id=place.channel_id, fail_if_not_exists=False
            )
        budget = self._budgets(place.channel_id)
        try:
            await send_reliably(
                budget,
                lambda: place.channel.send(embed=embed, reference=reference, allowed_mentions=NO_PINGS),  # type: ignore[arg-type]
                clock=self._clock,
            )
        except Exception:
            log.exception("could not post the sources of an answer")

    async def interrupt_all(self) -> None:
        """Ends every answer still streaming with what it has so far plus an interrupted note."""
        answers = list(self._answers)
        for answer in answers:
            answer.interrupted = True
        await asyncio.gather(
            *(answer.streamer.interrupt(wording.interrupted()) for answer in answers), return_exceptions=True
        )


async def _typing(channel: discord.abc.Messageable) -> None:
    try:
        await channel.typing()
    except Exception:
        log.debug("could not show typing", exc_info=True)


class _DiscordSurface:
    """The approval message and the sources reply of one run."""

    def __init__(self, streams: AnswerStreams, place: AnswerPlace) -> None:
        self._streams = streams
        self._place = place

    async def show_approval(self, event: ApprovalRequired) -> None:
        await self._streams._post_approval(event, self._place)

    async def show_sources(self, items: tuple[SourceItem, ...], answer_ids: list[str]) -> None:
        await self._streams._post_sources(items, self._place, reply_to=answer_ids[-1] if answer_ids else None)

    async def show_notice(self, text: str) -> None:
        budget = self._streams._budgets(self._place.channel_id)
        await send_reliably(
            budget, lambda: self._place.channel.send(text, allowed_mentions=NO_PINGS), clock=self._streams._clock
        )
