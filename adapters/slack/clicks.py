"""Approve / Reject clicks: parse the button, one call to the approval service, then show what it returned."""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from slack_bolt.async_app import AsyncAck

from adapters import wording as shared_wording
from adapters.answers import AnswerRunner
from adapters.gate import Gate
from core import wording as engine_wording
from core.approvals import ApprovalService, ApprovalView, Click
from core.requests import Actor

from . import wording
from .buttons import ACTION_PATTERN, Pressed, approval_blocks, approval_text, full_arguments, page_of, parse_button
from .inbound import SlackAccess
from .render import MAX_MESSAGE_TEXT_CHARS, code_messages, plain, sentence
from .surface import PLATFORM, ReplyTarget, SlackSurfaces

logger = logging.getLogger(__name__)

# Room kept in each "Full arguments" message for its heading.
ARGUMENTS_HEADING_ROOM = 200
# Calls whose full arguments this process posted, so repeated clicks do not fill the thread.
ARGUMENTS_SHOWN_REMEMBERED = 512


class SlackClicks:
    """Handles each click; every state change is decided by the approval service in Postgres."""

    def __init__(
        self, *, approvals: ApprovalService, runner: AnswerRunner, surfaces: SlackSurfaces, gate: Gate, access: SlackAccess,
        assistant: bool = False,
    ) -> None:
        self._approvals = approvals
        self._runner = runner
        self._surfaces = surfaces
        self._gate = gate
        self._access = access
        self._assistant = assistant  # SLACK_ASSISTANT (a resumed run's status is its surface's sign, everywhere)
        self._arguments_shown: OrderedDict[tuple[str, str], None] = OrderedDict()

    async def on_click(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """Bolt's action listener: acked at once, then decided."""
        await ack()
        with self._gate.track():
            payload = _Payload.read(body)
            match = ACTION_PATTERN.match(payload.action_id)
            pressed = parse_button(payload.action_id, payload.value)
            if match is None or pressed is None or not payload.user_id or not payload.channel:
                logger.warning("ignoring a click that is not a relaybot approval: %s", payload.action_id[:100])
                return
            reply = _ClickReply(
                self._surfaces, payload.target, user_id=payload.user_id, message_ts=payload.message_ts, pressed=pressed
            )
            refusal = self._refusal(payload)
            if refusal:
                await reply.tell(refusal)
                return
            try:
                click = await self._click_of(pressed, payload, approved=match.group(1) == "approve")
                result = await self._approvals.click(click)
                # A resumed run shows the thread's status while it works, as a question's answer does (its surface's sign).
                await self._runner.settle_click(
                    result, reply, self._surfaces.at(payload.target), message_key=f"{payload.channel}:{payload.message_ts}"
                )
            except Exception:
                logger.exception("approval click on %s failed", pressed.continuation_id)
                await reply.tell(shared_wording.click_failed())

    async def _click_of(self, pressed: Pressed, payload: _Payload, *, approved: bool) -> Click:
        """The decision a pressed button asks for."""
        among = None
        if pressed.call_id is None:
            # "Approve all" decides only the calls its message showed.
            view = await self._approvals.view(pressed.continuation_id, team=payload.team)
            shown = view.calls[pressed.first:pressed.first + pressed.count] if view is not None else ()
            among = tuple(call.call_id for call in shown)
        # The display name is a mention, so the engine's sentences name people the Slack way;
        # Slack has no admin rule, so refusals do not offer one.
        return Click(
            continuation_id=pressed.continuation_id, call_id=pressed.call_id, among=among, approved=approved,
            actor=Actor(id=payload.user_id, name=wording.mention(payload.user_id)), mention=wording.mention, admins=False,
            team=payload.team,  # an approval of another team is not found from this click's team, whoever clicks
        )

    async def on_arguments(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """"Full arguments": the call's arguments whole, as a reply in the approval's thread."""
        await ack()
        with self._gate.track():
            payload = _Payload.read(body)
            pressed = parse_button(payload.action_id, payload.value)
            if pressed is None or pressed.call_id is None or not payload.user_id or not payload.channel:
                logger.warning("ignoring a click that is not a relaybot button: %s", payload.action_id[:100])
                return
            reply = _ClickReply(self._surfaces, payload.target, user_id=payload.user_id, message_ts=payload.message_ts, pressed=pressed)
            refusal = self._refusal(payload)
            if refusal:
                await reply.tell(refusal)
                return
            shown_key = (pressed.continuation_id, pressed.call_id)
            if shown_key in self._arguments_shown:
                await reply.tell(shared_wording.full_arguments_already_shown())
                return
            try:
                view = await self._approvals.view(pressed.continuation_id, team=payload.team)
                call = next((c for c in view.calls if c.call_id == pressed.call_id), None) if view is not None else None
                if call is None:
                    await reply.tell(engine_wording.approval_not_found())
                    return
                self._remember_shown(shown_key)
                # In the approval's thread; a top-level approval (a DM) gets a thread of its own.
                thread = ReplyTarget(team_id=payload.target.team_id, channel=payload.channel,
                                     thread_ts=payload.target.thread_ts or payload.message_ts or None)
                parts = code_messages(full_arguments(call), max_chars=MAX_MESSAGE_TEXT_CHARS - ARGUMENTS_HEADING_ROOM)
                for number, part in enumerate(parts, start=1):
                    heading = sentence(shared_wording.full_arguments_heading(plain(call.tool), number, len(parts)))
                    await self._surfaces.post_paced(thread, text=f"{heading}\n{part}", unfurl_links=False, unfurl_media=False)
            except Exception:
                self._arguments_shown.pop(shown_key, None)
                logger.exception("could not show the full arguments of %s", pressed.continuation_id)
                await reply.tell(shared_wording.click_failed())

    def _refusal(self, payload: _Payload) -> str:
        """The sentence for a clicker who may not act here, or "" (the clicker's own team counts, as in
        a Slack Connect channel the payload's workspace is the host's)."""
        access = self._access.person(
            payload.user_id, (payload.user_team,) if payload.user_team else (), direct=payload.channel.startswith("D")
        )
        if access == "direct_messages_off":
            return shared_wording.direct_messages_off()
        if access == "refused":
            return shared_wording.not_your_workspace_to_decide()
        return ""

    def _remember_shown(self, key: tuple[str, str]) -> None:
        self._arguments_shown[key] = None
        while len(self._arguments_shown) > ARGUMENTS_SHOWN_REMEMBERED:
            self._arguments_shown.popitem(last=False)


class _Payload:
    """The parts of a block_actions payload a click needs, read defensively (any field may be missing)."""

    def __init__(self, body: dict[str, Any]) -> None:
        actions = body.get("actions")
        action = actions[0] if isinstance(actions, list) and actions and isinstance(actions[0], dict) else {}
        user = _dict(body.get("user"))
        container = _dict(body.get("container"))
        self.action_id = str(action.get("action_id") or "")
        self.value = str(action.get("value") or "")
        self.user_id = str(user.get("id") or "")
        self.user_team = str(user.get("team_id") or "")
        self.channel = str(container.get("channel_id") or _dict(body.get("channel")).get("id") or "")
        self.message_ts = str(container.get("message_ts") or "")
        thread_ts = container.get("thread_ts") or _dict(body.get("message")).get("thread_ts")
        team_id = str(_dict(body.get("team")).get("id") or self.user_team)
        self.target = ReplyTarget(team_id=team_id, channel=self.channel, thread_ts=str(thread_ts) if thread_ts else None)
        # The workspace whose message holds the buttons, as the approvals name their teams (`slack:T1`).
        self.team = f"{PLATFORM}:{team_id}"

    @classmethod
    def read(cls, body: dict[str, Any]) -> _Payload:
        return cls(body if isinstance(body, dict) else {})


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class _ClickReply:
    """Implements adapters.answers.ClickReply: edits the clicked message, tells the clicker privately."""

    def __init__(self, surfaces: SlackSurfaces, target: ReplyTarget, *, user_id: str, message_ts: str, pressed: Pressed) -> None:
        self._surfaces = surfaces
        self._target = target
        self._user_id = user_id
        self._message_ts = message_ts
        self._pressed = pressed

    async def redraw(self, view: ApprovalView) -> None:
        if self._message_ts:
            # The clicked message shows the calls of its part of the request.
            call_id = self._pressed.call_id
            first = page_of(view, call_id) if call_id is not None else self._pressed.first
            await self._surfaces.update_paced(
                self._target.team_id, self._target.channel, self._message_ts,
                text=approval_text(view, first=first), blocks=approval_blocks(view, first=first),
            )

    async def tell(self, text: str) -> None:
        try:
            # The deadline lane: a note to the person who clicked never waits behind deliveries.
            await self._surfaces.web.now(
                self._target.team_id, "chat.postEphemeral", channel=self._target.channel, user=self._user_id, text=text,
                **({"thread_ts": self._target.thread_ts} if self._target.thread_ts else {}),
            )
        except Exception:
            logger.exception("could not tell %s: %s", self._user_id, text)
