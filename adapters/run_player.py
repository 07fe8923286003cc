"""Plays one engine run into a MessageStreamer; a platform supplies only how approvals and sources look."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, assert_never

from adapters import wording
from adapters.streaming import MessageStreamer
from core.events import (
    AnswerDelta,
    ApprovalRequired,
    Done,
    Event,
    Failed,
    SourceItem,
    Sources,
    ToolCallFinished,
    ToolCallStarted,
)
from core.store.live_messages import LiveMessage, LiveMessages

log = logging.getLogger(__name__)


class RunSurface(Protocol):
    """The platform-specific end of a run: the approval message and the sources reply."""

    async def show_approval(self, event: ApprovalRequired) -> None: ...

    async def show_sources(self, items: tuple[SourceItem, ...], answer_ids: list[str]) -> None:
        """Called only when there are sources."""
        ...

    async def show_notice(self, text: str) -> None:
        """A short message in the answer's place (thread, DM or channel)."""
        ...


async def play_run(
    events: AsyncIterator[Event],
    streamer: MessageStreamer,
    surface: RunSurface,
    *,
    withdraw_approval: Callable[[str], Awaitable[bool]],
    start_on_first_event: bool = False,
    stopped: Callable[[], bool] = lambda: False,
) -> None:
    """Shows every event; the answer message always ends in a final state.

    `start_on_first_event`: post nothing until the engine says something (Discord spares its
    per-channel budget the placeholder); otherwise the placeholder goes out at once.
    `stopped`: the platform is interrupting this answer; stop reading.
    `withdraw_approval`: closes a paused run whose approval message could not be posted, so no
    request sits pending where nobody can see it.
    """
    started = False
    if not start_on_first_event:
        await streamer.start()
        started = True
    sources: tuple[SourceItem, ...] = ()
    wrote = False
    try:
        async for event in events:
            if stopped():
                return
            if not started:
                await streamer.start()
                started = True
            match event:
                case AnswerDelta():
                    wrote = wrote or bool(event.text.strip())
                    streamer.append(event.text)
                case ToolCallStarted():
                    streamer.set_status(wording.tool_running(event.tool))
                case ToolCallFinished():
                    streamer.set_status(None)
                case Sources():
                    sources = event.items
                case ApprovalRequired():
                    streamer.set_status(None)
                    await streamer.finish(None if wrote else wording.waiting_for_approval())
                    try:
                        await surface.show_approval(event)
                    except Exception:
                        log.exception("could not post approval request %s; withdrawing it", event.continuation_id)
                        await withdraw_approval(event.continuation_id)
                        await surface.show_notice(wording.approval_not_shown())
                    return
                case Done():
                    # What this stream showed is its final text: a resumed run's message holds only
                    # what came after the pause (the earlier part is in the message before).
                    ids = await streamer.finish(None if wrote else event.answer)
                    if sources:
                        await surface.show_sources(sources, ids)
                    return
                case Failed():
                    await streamer.fail(wording.failed(event.message))
                    return
                case _:
                    assert_never(event)
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()
    if not stopped():
        # The run ended without saying how: show what was written.
        await streamer.finish()


def live_message_hooks(
    live: LiveMessages, *, platform: str, workspace: str, channel: str, thread: str
) -> tuple[Callable[[str], Awaitable[None]], Callable[[list[str]], Awaitable[None]]]:
    """(remember, forget): record each posted answer message while it streams, drop them once final.

    A record left behind by a crash is what lets the next start mark that message interrupted.
    """

    async def remember(message_id: str) -> None:
        await live.add(LiveMessage(platform=platform, workspace=workspace, channel=channel, message_id=message_id, thread=thread))

    async def forget(message_ids: list[str]) -> None:
        for message_id in message_ids:
            try:
                await live.remove(platform=platform, channel=channel, message_id=message_id)
            except Exception:
                log.exception("could not forget live message %s", message_id)

    return remember, forget
