"""Streams one engine run into a Slack thread: edited answer message, approval message, sources."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from collections.abc import Awaitable, Callable

from slack_sdk.web.async_client import AsyncWebClient

from adapters import wording
from adapters.run_player import live_message_hooks, play_run
from adapters.streaming import MessageStreamer, StreamLimits
from core import wording as core_wording
from core.engine import Engine
from core.events import ApprovalRequired, Event, SourceItem
from core.store.live_messages import LiveMessages

from .approval_blocks import ApprovalView, approval_blocks, approval_text
from .budgets import ScaledClock, SlackBudgets
from .rendering import message_text, rendered_length
from .sources import sources_messages
from .transport import SlackTransport, send_paced

logger = logging.getLogger(__name__)

PLATFORM = "slack"
# Streamed text rolls over into a new message here, measured as rendered (escapes count); the
# margin is for cursor and status, and chat.update refuses more than 4,000 chars.
STREAM_MAX_CHARS = 3800
MIN_EDIT_INTERVAL_S = 1.0
INTERRUPT_WAIT_S = 5.0


@dataclass(frozen=True, kw_only=True)
class ReplyTarget:
    """Where a run's messages go; thread_ts None means top level (a DM's rolling conversation)."""

    team_id: str
    channel: str
    thread_ts: str | None


@dataclass(kw_only=True)
class _Inflight:
    target: ReplyTarget
    streamer: MessageStreamer
    task: asyncio.Task[object] | None
    forget: Callable[[list[str]], Awaitable[None]]


class AnswerRunner:
    """Owns the answers being streamed, so shutdown can mark them interrupted."""

    def __init__(
        self, *, client: AsyncWebClient, engine: Engine, live: LiveMessages, budgets: SlackBudgets,
        clock: ScaledClock,
    ) -> None:
        self._client = client
        self._engine = engine
        self._live = live
        self._budgets = budgets
        self._clock = clock
        self._limits = StreamLimits(
            max_chars=STREAM_MAX_CHARS, min_edit_interval_s=MIN_EDIT_INTERVAL_S, measure=rendered_length
        )
        self._inflight: dict[int, _Inflight] = {}

    @property
    def inflight_count(self) -> int:
        return len(self._inflight)

    async def stream(self, target: ReplyTarget, events: AsyncIterator[Event]) -> None:
        """Shows the run's events in Slack until it ends (or the task is cancelled)."""
        remember, forget = live_message_hooks(
            self._live, platform=PLATFORM, workspace=target.team_id, channel=target.channel,
            thread=target.thread_ts or "",
        )
        streamer = self._streamer(target, remember)
        inflight = _Inflight(target=target, streamer=streamer, task=asyncio.current_task(), forget=forget)
        self._inflight[id(inflight)] = inflight
        ended = False
        try:
            await play_run(
                events, streamer, _SlackSurface(self, target), withdraw_approval=self._engine.withdraw_approval
            )
            ended = True
        except Exception:
            logger.exception("answer failed in %s", target.channel)
            await streamer.fail(wording.failed(core_wording.unexpected_error()))
            ended = True
        finally:
            del self._inflight[id(inflight)]
            if ended:
                await forget(streamer.message_ids)

    async def interrupt_all(self) -> None:
        """Stops every answer still streaming and ends its message with the interrupted note."""
        inflight = list(self._inflight.values())
        for item in inflight:
            if item.task is not None and item.task is not asyncio.current_task():
                item.task.cancel()
        tasks = [item.task for item in inflight if item.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=INTERRUPT_WAIT_S)
        await asyncio.gather(*(self._interrupt(item) for item in inflight))

    def cancel_all(self) -> list[asyncio.Task[object]]:
        """Cancels every streaming task without touching Slack (their live rows stay for restart)."""
        tasks = [item.task for item in self._inflight.values() if item.task is not None]
        for task in tasks:
            task.cancel()
        return tasks

    async def _interrupt(self, item: _Inflight) -> None:
        try:
            await item.streamer.interrupt(wording.interrupted())
        finally:
            await item.forget(item.streamer.message_ids)

    def _streamer(self, target: ReplyTarget, remember: Callable[[str], Awaitable[None]]) -> MessageStreamer:
        return MessageStreamer(
            SlackTransport(self._client, channel=target.channel, thread_ts=target.thread_ts,
                           time_scale=self._clock.time_scale),
            limits=self._limits,
            edit_budget=self._budgets.edit(target.team_id),
            post_budget=self._budgets.post(target.team_id, target.channel),
            clock=self._clock,
            on_message_posted=remember,
        )

    async def _post_approval(self, target: ReplyTarget, event: ApprovalRequired) -> None:
        view = ApprovalView.from_event(event)
        response = await send_paced(
            lambda: self._client.chat_postMessage(
                channel=target.channel, thread_ts=target.thread_ts, text=approval_text(view),
                blocks=approval_blocks(view),
            ),
            budget=self._budgets.post(target.team_id, target.channel), clock=self._clock,
        )
        await self._engine.continuations.add_message_ref(
            uuid.UUID(event.continuation_id),
            {"platform": PLATFORM, "team": target.team_id, "channel": target.channel, "ts": str(response["ts"]),
             "thread_ts": target.thread_ts or ""},
        )

    async def _post_notice(self, target: ReplyTarget, text: str) -> None:
        await send_paced(
            lambda: self._client.chat_postMessage(
                channel=target.channel, thread_ts=target.thread_ts, text=message_text(text)
            ),
            budget=self._budgets.post(target.team_id, target.channel), clock=self._clock,
        )

    async def _post_sources(self, target: ReplyTarget, items: tuple[SourceItem, ...], answer_ids: list[str]) -> None:
        thread_ts = target.thread_ts or (answer_ids[0] if answer_ids else None)
        for text in sources_messages(items):
            await send_paced(
                lambda text=text: self._client.chat_postMessage(  # type: ignore[misc]
                    channel=target.channel, thread_ts=thread_ts, text=text, unfurl_links=False, unfurl_media=False,
                ),
                budget=self._budgets.post(target.team_id, target.channel), clock=self._clock,
            )


class _SlackSurface:
    """The approval message and the sources reply of one run, in its thread."""

    def __init__(self, runner: AnswerRunner, target: ReplyTarget) -> None:
        self._runner = runner
        self._target = target

    async def show_approval(self, event: ApprovalRequired) -> None:
        await self._runner._post_approval(self._target, event)

    async def show_sources(self, items: tuple[SourceItem, ...], answer_ids: list[str]) -> None:
        await self._runner._post_sources(self._target, items, answer_ids)

    async def show_notice(self, text: str) -> None:
        await self._runner._post_notice(self._target, text)
