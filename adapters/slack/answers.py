"""Streams one engine run into a Slack thread: edited answer message, approval message, sources."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import assert_never

from slack_sdk.web.async_client import AsyncWebClient

from adapters.streaming import MessageStreamer, StreamLimits
from core import wording
from core.engine import Engine
from core.events import (
    AnswerDelta,
    ApprovalRequired,
    Done,
    Event,
    Failed,
    Sources,
    ToolCallFinished,
    ToolCallStarted,
)
from core.store.live_messages import LiveMessage, LiveMessages

from . import messages
from .approval_blocks import ApprovalView, approval_blocks, approval_text
from .budgets import ScaledClock, SlackBudgets
from .sources import sources_messages
from .transport import SlackTransport, send_paced

logger = logging.getLogger(__name__)

PLATFORM = "slack"
# Streamed text rolls over into a new message here; rendering (escapes) may add a little, and
# chat.update refuses more than 4,000 chars.
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
        self._limits = StreamLimits(max_chars=STREAM_MAX_CHARS, min_edit_interval_s=MIN_EDIT_INTERVAL_S)
        self._inflight: dict[int, _Inflight] = {}

    @property
    def inflight_count(self) -> int:
        return len(self._inflight)

    async def stream(self, target: ReplyTarget, events: AsyncIterator[Event]) -> None:
        """Shows the run's events in Slack until it ends (or the task is cancelled)."""
        streamer = self._streamer(target)
        inflight = _Inflight(target=target, streamer=streamer, task=asyncio.current_task())
        self._inflight[id(inflight)] = inflight
        ended = False
        try:
            await streamer.start()
            ended = await self._consume(target, streamer, events)
        except Exception:
            logger.exception("answer failed in %s", target.channel)
            await streamer.fail(messages.failed(wording.unexpected_error()))
            ended = True
        finally:
            del self._inflight[id(inflight)]
            if ended:
                await self._forget(target, streamer.message_ids)

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
            await item.streamer.interrupt(messages.interrupted())
        finally:
            await self._forget(item.target, item.streamer.message_ids)

    async def _consume(self, target: ReplyTarget, streamer: MessageStreamer, events: AsyncIterator[Event]) -> bool:
        sources: Sources | None = None
        text_seen = False
        async for event in events:
            match event:
                case AnswerDelta():
                    text_seen = text_seen or bool(event.text.strip())
                    streamer.append(event.text)
                case ToolCallStarted():
                    streamer.set_status(messages.tool_running(event.tool))
                case ToolCallFinished():
                    streamer.set_status(None)
                case ApprovalRequired():
                    streamer.set_status(None)
                    await streamer.finish(None if text_seen else messages.waiting_for_approval())
                    await self._post_approval(target, event)
                    return True
                case Sources():
                    sources = event
                case Done():
                    ids = await streamer.finish(None if text_seen else event.answer)
                    if sources is not None and sources.items:
                        await self._post_sources(target, sources, ids)
                    return True
                case Failed():
                    await streamer.fail(messages.failed(event.message))
                    return True
                case _:
                    assert_never(event)
        # The run ended without saying how: show what was written.
        await streamer.finish()
        return True

    def _streamer(self, target: ReplyTarget) -> MessageStreamer:
        async def remember(message_ts: str) -> None:
            await self._live.add(LiveMessage(
                platform=PLATFORM, workspace=target.team_id, channel=target.channel, message_id=message_ts,
                thread=target.thread_ts or "",
            ))

        return MessageStreamer(
            SlackTransport(self._client, channel=target.channel, thread_ts=target.thread_ts,
                           time_scale=self._clock.time_scale),
            limits=self._limits,
            edit_budget=self._budgets.edit(target.team_id),
            post_budget=self._budgets.post(target.team_id, target.channel),
            clock=self._clock,
            on_message_posted=remember,
        )

    async def _forget(self, target: ReplyTarget, message_ids: list[str]) -> None:
        for message_ts in message_ids:
            try:
                await self._live.remove(platform=PLATFORM, channel=target.channel, message_id=message_ts)
            except Exception:
                logger.exception("could not forget live message %s", message_ts)

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

    async def _post_sources(self, target: ReplyTarget, sources: Sources, answer_ids: list[str]) -> None:
        thread_ts = target.thread_ts or (answer_ids[0] if answer_ids else None)
        for text in sources_messages(sources.items):
            await send_paced(
                lambda text=text: self._client.chat_postMessage(  # type: ignore[misc]
                    channel=target.channel, thread_ts=thread_ts, text=text, unfurl_links=False, unfurl_media=False,
                ),
                budget=self._budgets.post(target.team_id, target.channel), clock=self._clock,
            )
