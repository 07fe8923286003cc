"""Approve / Reject clicks: parse the button, one call to the approval service, then show what it returned."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck

from adapters import wording as shared_wording
from adapters.answers import AnswerRunner
from adapters.gate import Gate
from core.approvals import ApprovalService, ApprovalView
from core.requests import Actor

from . import wording
from .buttons import ACTION_PATTERN, approval_blocks, approval_text, parse_button_value
from .surface import ReplyTarget, SlackSurfaces

logger = logging.getLogger(__name__)


class SlackClicks:
    """Handles each click; every state change is decided by the approval service in Postgres."""

    def __init__(self, *, approvals: ApprovalService, runner: AnswerRunner, surfaces: SlackSurfaces, gate: Gate) -> None:
        self._approvals = approvals
        self._runner = runner
        self._surfaces = surfaces
        self._gate = gate

    async def on_click(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """Bolt's action listener: acked at once, then decided."""
        await ack()
        with self._gate.track():
            action = (body.get("actions") or [{}])[0]
            match = ACTION_PATTERN.match(str(action.get("action_id", "")))
            parsed = parse_button_value(str(action.get("value", "")))
            user_id = str(body.get("user", {}).get("id", ""))
            container = body.get("container") or {}
            channel = str(container.get("channel_id") or body.get("channel", {}).get("id", ""))
            message_ts = str(container.get("message_ts") or "")
            thread_ts = container.get("thread_ts") or (body.get("message") or {}).get("thread_ts")
            team_id = str((body.get("team") or {}).get("id") or body.get("user", {}).get("team_id", ""))
            if match is None or parsed is None or not user_id or not channel:
                logger.warning("ignoring a click that is not a relaybot approval: %s", action.get("action_id"))
                return
            continuation_id, call_id = parsed
            target = ReplyTarget(team_id=team_id, channel=channel, thread_ts=str(thread_ts) if thread_ts else None)
            reply = _ClickReply(self._surfaces, target, user_id=user_id, message_ts=message_ts)
            try:
                # The display name is a mention, so the engine's sentences name people the Slack way.
                result = await self._approvals.click(
                    continuation_id, call_id=call_id, approved=match.group(1) == "approve",
                    actor=Actor(id=user_id, name=wording.mention(user_id)), mention=wording.mention,
                )
                await self._runner.settle_click(result, reply, self._surfaces.at(target), message_key=f"{channel}:{message_ts}")
            except Exception:
                logger.exception("approval click on %s failed", continuation_id)
                await reply.tell(shared_wording.click_failed())


class _ClickReply:
    """Implements adapters.answers.ClickReply: edits the clicked message, tells the clicker privately."""

    def __init__(self, surfaces: SlackSurfaces, target: ReplyTarget, *, user_id: str, message_ts: str) -> None:
        self._surfaces = surfaces
        self._target = target
        self._user_id = user_id
        self._message_ts = message_ts

    async def redraw(self, view: ApprovalView) -> None:
        if self._message_ts:
            await self._surfaces.update_paced(
                self._target.team_id, self._target.channel, self._message_ts,
                text=approval_text(view), blocks=approval_blocks(view),
            )

    async def tell(self, text: str) -> None:
        try:
            await self._surfaces.client.chat_postEphemeral(
                channel=self._target.channel, user=self._user_id, text=text,
                **({"thread_ts": self._target.thread_ts} if self._target.thread_ts else {}),
            )
        except Exception:
            logger.exception("could not tell %s: %s", self._user_id, text)
