"""Slack's end of an answer: its messages in a thread (post, edit), the approval message, the sources reply,
notices — and reading a message back to repair what a crash left."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from adapters import wording
from adapters.answers import AnswerPlace, Pacing
from adapters.streaming import Priority, StreamLimits
from core.approvals import ApprovalView
from core.citations import Citation
from core.ports import LiveMessage, PendingFinal

from .buttons import approval_blocks, approval_text, page_starts
from .controls import StopMessage
from .feedback import feedback_blocks
from .render import MAX_MESSAGE_TEXT_CHARS, markdown_text, rendered_length, sources_messages
from .transport import ScaledClock, SlackBudgets, SlackTransport, SlackWeb, is_part, part_metadata

PLATFORM = "slack"
# Streamed text rolls over into a new message here, measured as rendered (escapes count); the
# margin is for cursor and status, and chat.update refuses more than 4,000 chars.
STREAM_MAX_CHARS = 3800
MIN_EDIT_INTERVAL_S = 1.0


@dataclass(frozen=True, kw_only=True)
class ReplyTarget:
    """Where a run's messages go; thread_ts None means top level (a DM's rolling conversation).

    `recipient_user` / `recipient_team`: who asked, and their own team (Slack's native streams in a
    channel are addressed to them); None where unknown (notices, clicks)."""

    team_id: str
    channel: str
    thread_ts: str | None
    recipient_user: str | None = None
    recipient_team: str | None = None


class SlackSurfaces:
    """Makes the surface of each answer; one per adapter, sharing its client, budgets and clock."""

    def __init__(
        self, *, client: AsyncWebClient, budgets: SlackBudgets, clock: ScaledClock, placeholder_after_s: float = 1.0,
        feedback: bool = False,
    ) -> None:
        self.web = SlackWeb(client, budgets=budgets, clock=clock)  # every Web API call goes through it
        self._client = client
        self.feedback = feedback  # 👍/👎 under each final answer (FEEDBACK_BUTTONS)
        self.budgets = budgets
        self.clock = clock
        # The wait for a first text is about the model, which runs on real time: real seconds on Slack's clock.
        self.limits = StreamLimits(
            max_chars=STREAM_MAX_CHARS, min_edit_interval_s=MIN_EDIT_INTERVAL_S, measure=rendered_length,
            placeholder_after_s=placeholder_after_s / clock.time_scale,
        )

    @property
    def client(self) -> AsyncWebClient:
        """The client itself, for what is not a Web API call (Bolt, a file download's token); calls go through `web`."""
        return self._client

    def at(self, target: ReplyTarget) -> SlackSurface:
        return SlackSurface(self, target)

    def transport(self, target: ReplyTarget) -> SlackTransport:
        return SlackTransport(self.web, team_id=target.team_id, channel=target.channel, thread_ts=target.thread_ts)

    async def post_paced(
        self, target: ReplyTarget, *, priority: Priority = Priority.FINAL, **message: Any
    ) -> dict[str, Any]:
        """chat.postMessage into the target's channel (and thread), on its channel's budget, never twice."""
        return await self.web.post(
            team_id=target.team_id, channel=target.channel, thread_ts=target.thread_ts, priority=priority, **message
        )

    async def update_paced(self, team_id: str, channel: str, ts: str, **message: Any) -> None:
        """chat.update of one message, on the workspace's edit budget."""
        await self.web.call("chat.update", budget=self.budgets.edit(team_id), channel=channel, ts=ts, **message)


class SlackSurface:
    """Implements adapters.answers.Surface for one answer in one Slack thread (or a DM's top level)."""

    def __init__(self, surfaces: SlackSurfaces, target: ReplyTarget) -> None:
        self._surfaces = surfaces
        self.target = target
        self._transport = surfaces.transport(target)
        self.place = AnswerPlace(
            platform=PLATFORM, workspace=target.team_id, channel=target.channel, thread=target.thread_ts or ""
        )
        self.pacing = Pacing(
            limits=surfaces.limits,
            edit_budget=surfaces.budgets.edit(target.team_id),
            post_budget=surfaces.budgets.post(target.team_id, target.channel),
            clock=surfaces.clock,
        )
        self._stop_button = StopMessage(surfaces, target)

    async def post(self, text: str, *, key: str | None = None) -> str:
        return await self._transport.post(text, key=key)

    # AnswerControls (adapters/answers.py): Stop is a message of its own in the thread (see controls.py).
    async def show_stop(self, run_id: str) -> None:
        await self._stop_button.show(run_id)

    async def end_stop(self) -> None:
        return None

    async def clear_stop(self) -> None:
        await self._stop_button.clear()

    async def show_feedback(self, run_id: str, answer_ids: list[str]) -> None:
        """👍/👎 in a small message of its own, under the answer and its sources reply: an answer is `markdown_text`
        (no blocks beside it), and the sources reply stays plain text. In a DM's top level it goes in the answer's
        thread, as the sources do."""
        if not self._surfaces.feedback:
            return
        # Behind every answer's first and final texts: under a burst, 👍/👎 can wait.
        await self._surfaces.post_paced(
            self._beside(answer_ids), text=wording.FEEDBACK_PROMPT, blocks=feedback_blocks(run_id),
            priority=Priority.INTERMEDIATE,
        )

    async def edit(self, message_id: str, text: str) -> None:
        await self._transport.edit(message_id, text)

    async def show_working(self) -> None:
        # The streamer's placeholder message is the sign of life on Slack.
        return None

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
        web = self._surfaces.web
        window: dict[str, Any] = {"latest": message.message_id, "oldest": message.message_id, "inclusive": True, "limit": 1}
        if message.thread and message.thread != message.message_id:
            method, window["ts"] = "conversations.replies", message.thread
        else:
            method = "conversations.history"
        response = await web.call(
            method, budget=web.budgets.read(message.workspace, method), channel=message.channel, **window
        )
        for found in response.get("messages", []):
            if str(found.get("ts")) == message.message_id:
                return str(found.get("text") or "")
        return None

    async def replace_shown(self, message: LiveMessage, text: str) -> None:
        await self._surfaces.update_paced(message.workspace, message.channel, message.message_id, markdown_text=text)

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

    async def post_part(self, final: PendingFinal, index: int, text: str) -> str:
        target = ReplyTarget(team_id=final.workspace, channel=final.channel, thread_ts=final.thread or None)
        response = await self._surfaces.post_paced(
            target, key=f"{final.answer_id}:{index}", markdown_text=markdown_text(text), unfurl_links=False,
            unfurl_media=False,
        )
        return str(response["ts"])

    async def edit_part(self, final: PendingFinal, message_id: str, text: str) -> None:
        await self._surfaces.update_paced(final.workspace, final.channel, message_id, markdown_text=markdown_text(text))

    async def find_part(self, final: PendingFinal, index: int, *, since: float) -> str | None:
        """The part already posted (a post attempted at `since`, epoch seconds, whose outcome nobody saw), or None."""
        found = await self._surfaces.web.find(
            team_id=final.workspace, channel=final.channel, thread_ts=final.thread or None,
            metadata=part_metadata(f"{final.answer_id}:{index}"), since=since,
        )
        return None if found is None else str(found["ts"])
