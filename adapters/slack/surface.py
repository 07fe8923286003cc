"""Slack's end of an answer: its messages in a thread (post, edit), the approval message, the sources reply,
notices — and reading a message back to repair what a crash left."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from adapters.answers import AnswerPlace, Pacing
from adapters.streaming import Priority, StreamLimits
from adapters.streaming.answer_place import asked_at
from adapters.streaming.limits import SIGNED_PLACEHOLDER_AFTER_S
from adapters.streaming.transport import LiveText
from core.approvals import ApprovalView
from core.citations import Citation
from core.ports import LiveMessage, PendingFinal

from .buttons import approval_blocks, approval_text, page_starts
from .controls import AnswerButtons, answer_content, run_of, shown_as
from .render import MAX_MESSAGE_TEXT_CHARS, markdown_text, rendered_length, sources_messages
from .team_clients import TeamClients
from .transport import ScaledClock, SlackBudgets, SlackTransport, SlackWeb, is_part
from .working import SignPlace, SlackSigns, WorkingSign

logger = logging.getLogger(__name__)

PLATFORM = "slack"
# Streamed text rolls over into a new message here, measured as rendered (escapes count); the
# margin is for cursor and status, and chat.update refuses more than 4,000 chars.
STREAM_MAX_CHARS = 3800
MIN_EDIT_INTERVAL_S = 1.0
# Kept finals whose run (for their 👍/👎) this process read back: a few passes' worth, the oldest forgotten first.
RUNS_KEPT = 256


@dataclass(frozen=True, kw_only=True)
class ReplyTarget:
    """Where a run's messages go; thread_ts None means top level (a DM's rolling conversation).

    `recipient_user` / `recipient_team`: who asked, and their own team (Slack's native streams in a
    channel are addressed to them); `question_ts`: the question's own message (where a 👀 goes); None where
    unknown (notices, clicks)."""

    team_id: str
    channel: str
    thread_ts: str | None
    recipient_user: str | None = None
    recipient_team: str | None = None
    question_ts: str | None = None


def _ts_seconds(ts: str | None) -> float | None:
    """A Slack message ts ("seconds.micros") as epoch seconds; None when there is none or it is not one."""
    try:
        return float(ts) if ts else None
    except ValueError:
        return None


class SlackSurfaces:
    """Makes the surface of each answer; one per adapter, sharing its team clients, budgets and clock.

    `client`: the per-team clients (adapters/slack/team_clients.py), or one AsyncWebClient whose token is the only
    team's (a test's, a tool's)."""

    def __init__(
        self, *, client: TeamClients | AsyncWebClient, budgets: SlackBudgets, clock: ScaledClock,
        placeholder_after_s: float = 1.0, feedback: bool = False,
    ) -> None:
        self.clients = client if isinstance(client, TeamClients) else TeamClients.of(client)
        self.web = SlackWeb(self.clients, budgets=budgets, clock=clock)  # every Web API call goes through it
        self.signs = SlackSigns(web=self.web, clock=clock)
        self.feedback = feedback  # 👍/👎 under each final answer (FEEDBACK_BUTTONS)
        self.budgets = budgets
        self.clock = clock
        # The wait for a first text is about the model, which runs on real time: real seconds on Slack's clock.
        self.limits = StreamLimits(
            max_chars=STREAM_MAX_CHARS, min_edit_interval_s=MIN_EDIT_INTERVAL_S, measure=rendered_length,
            placeholder_after_s=placeholder_after_s / clock.time_scale,
            signed_placeholder_after_s=SIGNED_PLACEHOLDER_AFTER_S / clock.time_scale,
        )

    @property
    def client(self) -> TeamClients:
        """The team clients, for what is not a Web API call (their session, a file download's token); calls go
        through `web`."""
        return self.clients

    def at(self, target: ReplyTarget, *, sign: WorkingSign | None = None) -> SlackSurface:
        return SlackSurface(self, target, sign=sign)

    def sign(self, target: ReplyTarget) -> WorkingSign:
        """The first sign of an answer in `target` (shown by `show()`, taken away by `end()`)."""
        return self.signs.at(SignPlace(
            team_id=target.team_id, channel=target.channel, thread_ts=target.thread_ts, question_ts=target.question_ts
        ))

    def transport(self, target: ReplyTarget, buttons: AnswerButtons | None = None,
                  on_posted: Callable[[], None] | None = None) -> SlackTransport:
        return AnswerTransport(self.web, target, buttons or AnswerButtons(), on_posted=on_posted)

    async def post_paced(
        self, target: ReplyTarget, *, priority: Priority = Priority.FINAL, **message: Any
    ) -> dict[str, Any]:
        """chat.postMessage into the target's channel (and thread), on its channel's budget, never twice."""
        return await self.web.post(
            team_id=target.team_id, channel=target.channel, thread_ts=target.thread_ts, priority=priority, **message
        )

    async def update_paced(self, team_id: str, channel: str, ts: str, **message: Any) -> None:
        """chat.update of one message, on the workspace's edit budget."""
        await self.web.call(team_id, "chat.update", budget=self.budgets.edit(team_id), channel=channel, ts=ts, **message)


class AnswerTransport(SlackTransport):
    """The streamer's transport for one answer: each post and edit carries the buttons `AnswerButtons` says."""

    def __init__(self, web: SlackWeb, target: ReplyTarget, buttons: AnswerButtons, *,
                 on_posted: Callable[[], None] | None = None) -> None:
        super().__init__(web, team_id=target.team_id, channel=target.channel, thread_ts=target.thread_ts)
        self.buttons = buttons
        self._on_posted = on_posted
        self._sending: dict[str, Any] = {}

    def content(self, message_id: str | None, text: str) -> dict[str, Any]:
        self._sending = self.buttons.content(message_id, text)
        return self._sending

    async def post(self, text: str, *, key: str | None = None) -> str:
        ts = await super().post(text, key=key)
        self.buttons.sent(ts, text, self._sending)
        if self._on_posted is not None:
            self._on_posted()
        return ts

    async def edit(self, message_id: str, text: str) -> None:
        await super().edit(message_id, text)
        self.buttons.sent(message_id, text, self._sending)


class SlackSurface:
    """Implements adapters.answers.Surface for one answer in one Slack thread (or a DM's top level)."""

    def __init__(self, surfaces: SlackSurfaces, target: ReplyTarget, *, sign: WorkingSign | None = None) -> None:
        self._surfaces = surfaces
        self.target = target
        self._sign = sign or surfaces.sign(target)
        self._buttons = AnswerButtons()
        self._transport = surfaces.transport(target, self._buttons, on_posted=self._sign.replied)
        self.place = AnswerPlace(
            platform=PLATFORM, workspace=target.team_id, channel=target.channel, thread=target.thread_ts or ""
        )
        self.pacing = Pacing(
            limits=surfaces.limits,
            edit_budget=surfaces.budgets.edit(target.team_id),
            post_budget=surfaces.budgets.post(target.team_id, target.channel),
            clock=surfaces.clock,
            since=asked_at(surfaces.clock, _ts_seconds(target.question_ts), time_scale=surfaces.clock.time_scale),
            sign_shown=lambda: self._sign.shown != "none",
        )

    async def post(self, text: str, *, key: str | None = None) -> str:
        return await self._transport.post(text, key=key)

    # AnswerControls (adapters/answer_protocols.py): the buttons ride the answer's own messages (controls.py), so
    # they cost no call of their own: Stop on each live update, 👍/👎 on the final text of the last message.
    async def show_stop(self, run_id: str) -> None:
        self._buttons.stop = run_id

    async def end_stop(self) -> None:
        self._buttons.stop = None

    async def will_finish(self, run_id: str) -> None:
        if self._surfaces.feedback:
            self._buttons.feedback = run_id

    async def clear_stop(self) -> None:
        """The answer ended: the final texts dropped Stop already; the working sign goes."""
        self._buttons.stop = None
        await self._sign.end()

    async def show_feedback(self, run_id: str, answer_ids: list[str]) -> None:
        """The final texts carried 👍/👎: only the last message keeps them (one edit each for the rare final
        that was laid over several messages, or whose last message kept an earlier text)."""
        buttons = self._buttons
        if buttons.feedback != run_id or not answer_ids:
            return
        last = answer_ids[-1]
        for message_id, text in list(buttons.with_feedback.items()):
            if message_id != last:
                await self._redraw(message_id, text, feedback=None)
        # Only over a final text: a message still showing a live update waits for the outbox, whose edit adds them.
        shown = buttons.shown.get(last)
        if last not in buttons.with_feedback and shown is not None and not isinstance(shown, LiveText):
            await self._redraw(last, shown, feedback=run_id)

    async def _redraw(self, message_id: str, text: str, *, feedback: str | None) -> None:
        content = answer_content(text, feedback=feedback, whole=True)
        await self._surfaces.update_paced(self.target.team_id, self.target.channel, message_id, **content)
        self._buttons.sent(message_id, text, content)

    async def edit(self, message_id: str, text: str) -> None:
        await self._transport.edit(message_id, text)

    async def show_working(self) -> None:
        """The status in the thread (or 👀 on the question), at once and beside the answer: never awaited by it."""
        self._sign.show()

    async def show_approval(self, view: ApprovalView) -> dict[str, Any]:
        """One message per MAX_SHOWN_CALLS calls, so every call is shown where it is decided; the
        reference names them all (`parts` beyond the first) for expiry to edit."""
        posted: list[dict[str, Any]] = []
        for first in page_starts(view):
            response = await self._surfaces.post_paced(
                self.target, text=approval_text(view, first=first), blocks=approval_blocks(view, first=first)
            )
            posted.append({"ts": str(response["ts"]), "first": first})
        ref: dict[str, Any] = {
            "platform": PLATFORM, "team": self.target.team_id, "channel": self.target.channel,
            "ts": posted[0]["ts"], "thread_ts": self.target.thread_ts or "",
        }
        if len(posted) > 1:
            ref["parts"] = posted[1:]
        return ref

    async def show_sources(self, citations: tuple[Citation, ...], answer_ids: list[str]) -> None:
        target = self._beside(answer_ids)
        for text in sources_messages(citations):
            await self._surfaces.post_paced(target, text=text, unfurl_links=False, unfurl_media=False)

    async def show_notice(self, text: str) -> None:
        await self._surfaces.post_paced(self.target, markdown_text=markdown_text(text))

    def _beside(self, answer_ids: list[str]) -> ReplyTarget:
        """Where what goes under an answer is posted: its thread; a DM answer at top level, the answer's own thread."""
        return self.target if self.target.thread_ts or not answer_ids else ReplyTarget(
            team_id=self.target.team_id, channel=self.target.channel, thread_ts=answer_ids[0]
        )


class SlackShownMessages:
    """Implements adapters.answers.ShownMessages: reads a message back from Slack and rewrites it as shown."""

    max_chars = MAX_MESSAGE_TEXT_CHARS

    def __init__(self, surfaces: SlackSurfaces) -> None:
        self._surfaces = surfaces

    def render(self, markdown: str) -> str:
        return markdown_text(markdown)

    async def read_shown(self, message: LiveMessage) -> str | None:
        found = await read_message(
            self._surfaces.web, team_id=message.workspace, channel=message.channel, thread=message.thread,
            ts=message.message_id,
        )
        return None if found is None else str(found.get("text") or "")

    async def replace_shown(self, message: LiveMessage, text: str) -> None:
        # Sent whole: the Stop button a live update carried goes with it.
        await self._surfaces.update_paced(message.workspace, message.channel, message.message_id,
                                          **shown_as(text, buttons=[], whole=True))

    async def find_post(self, message: LiveMessage, key: str, *, since: float) -> str | None:
        """Implements adapters.answers.PostFinder: the message a post of `key` attempted at `since` made, or None."""
        web = self._surfaces.web
        native = getattr(self._surfaces, "native", None)
        live: set[str] = native.live_streams if native is not None else set()
        streams: list[str] = []  # messages without metadata, in order: the post's, if none carries its key

        def made(found: dict[str, Any]) -> bool:
            if is_part(found, key):
                return True
            # A native stream carries no metadata until it is stopped (every other post of ours carries some); one
            # this process is still streaming is another answer's, and the thread's root is the question.
            ts = str(found.get("ts") or "")
            if found.get("bot_id") and "metadata" not in found and ts not in live and ts != message.thread:
                streams.append(ts)
            return False

        found = await web.find_where(
            team_id=message.workspace, channel=message.channel, thread_ts=message.thread or None, since=since, match=made
        )
        if found is None:
            return streams[0] if streams else None
        return str(found["ts"])


class SlackFinalDelivery:
    """Implements adapters.answers.FinalDelivery and PartFinder: a kept final's parts, posted once each (marked
    with their metadata), and looked up only where a post of one was attempted without its outcome seen."""

    def __init__(self, surfaces: SlackSurfaces) -> None:
        self._surfaces = surfaces
        self._runs: dict[str, str | None] = {}  # answer id → the run its buttons name (read once per final)

    async def post_part(self, final: PendingFinal, index: int, text: str) -> str:
        target = ReplyTarget(team_id=final.workspace, channel=final.channel, thread_ts=final.thread or None)
        feedback = await self._feedback(final) if index == len(final.parts) - 1 else None
        response = await self._surfaces.post_paced(
            target, key=f"{final.answer_id}:{index}", **answer_content(text, feedback=feedback), unfurl_links=False,
            unfurl_media=False,
        )
        return str(response["ts"])

    async def edit_part(self, final: PendingFinal, message_id: str, text: str) -> None:
        """The part's final text, whole: a Stop button a live update left goes; the last part gets 👍/👎."""
        last = final.parts[-1]
        # Read before this edit, whichever part it is: it may take away the Stop that names the run.
        run = await self._feedback(final)
        feedback = run if last.message_id in (None, message_id) and last.text == text else None
        await self._surfaces.update_paced(final.workspace, final.channel, message_id,
                                          **answer_content(text, feedback=feedback, whole=True))

    async def _feedback(self, final: PendingFinal) -> str | None:
        """The run a kept final's 👍/👎 name: read from the buttons of its latest message (the one being written
        carried Stop, whose value is the run), before any edit of this delivery; None without one."""
        if not self._surfaces.feedback:
            return None
        if final.answer_id not in self._runs:
            shown = [part.message_id for part in final.parts if part.message_id]
            run = None
            if shown:
                try:
                    found = await read_message(self._surfaces.web, team_id=final.workspace, channel=final.channel,
                                               thread=final.thread, ts=shown[-1])
                    run = None if found is None else run_of(found)
                except Exception as exc:
                    logger.info("could not read answer %s's buttons back (%s); its final goes without 👍/👎",
                                final.answer_id, exc)
            self._runs[final.answer_id] = run
            while len(self._runs) > RUNS_KEPT:
                self._runs.pop(next(iter(self._runs)))
        return self._runs[final.answer_id]

    async def find_part(self, final: PendingFinal, index: int, *, since: float) -> str | None:
        """The part already posted (a post attempted at `since`, epoch seconds, whose outcome nobody saw), or None.

        By its metadata; failing that, a native stream never stopped (it has none yet) that shows the start of
        the part: the caller's edit finishes it, where a post would set the part beside the cut-short stream."""
        key = f"{final.answer_id}:{index}"
        native = getattr(self._surfaces, "native", None)
        live: set[str] = native.live_streams if native is not None else set()
        rendered = markdown_text(final.parts[index].text).lstrip()
        streams: list[str] = []  # unstopped streams showing the part's start, in order

        def made(found: dict[str, Any]) -> bool:
            if is_part(found, key):
                return True
            # Every other message of ours carries metadata; a stream this process is still writing is another
            # answer's, the thread's root is the question, and one whose text is not the part's start (or is
            # empty, which proves nothing) may be anyone's.
            ts, shown = str(found.get("ts") or ""), str(found.get("text") or "").strip()
            if (found.get("bot_id") and "metadata" not in found and ts not in live and ts != final.thread
                    and shown and rendered.startswith(shown)):
                streams.append(ts)
            return False

        found = await self._surfaces.web.find_where(
            team_id=final.workspace, channel=final.channel, thread_ts=final.thread or None, since=since, match=made,
        )
        if found is None:
            return streams[0] if streams else None
        return str(found["ts"])


async def read_message(web: SlackWeb, *, team_id: str, channel: str, thread: str, ts: str) -> dict[str, Any] | None:
    """One message read back (conversations.replies in a thread, history at top level), or None when it is gone."""
    window: dict[str, Any] = {"latest": ts, "oldest": ts, "inclusive": True, "limit": 1}
    if thread and thread != ts:
        method, window["ts"] = "conversations.replies", thread
    else:
        method = "conversations.history"
    response = await web.call(team_id, method, budget=web.budgets.read(team_id, method), channel=channel, **window)
    for found in response.get("messages", []):
        if str(found.get("ts")) == ts:
            return dict(found)
    return None
