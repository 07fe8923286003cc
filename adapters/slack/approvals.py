"""Approve / Reject clicks: check the clicker, record the decision, edit the message, resume."""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from adapters import wording
from adapters.approval_flow import ClickReplies, handle_click
from core.engine import DecisionOutcome, Engine
from core.requests import Actor
from core.store.continuations import ContinuationRow

from . import messages
from .answers import AnswerRunner, ReplyTarget
from .approval_blocks import ACTION_PATTERN, ApprovalView, approval_blocks, approval_text, parse_button_value
from .budgets import ScaledClock, SlackBudgets
from .transport import send_paced

logger = logging.getLogger(__name__)


class ApprovalClicks:
    """Handles one click at a time; every state change is decided by the engine in Postgres."""

    def __init__(
        self, *, client: AsyncWebClient, engine: Engine, runner: AnswerRunner, budgets: SlackBudgets,
        clock: ScaledClock,
    ) -> None:
        self._client = client
        self._engine = engine
        self._runner = runner
        self._budgets = budgets
        self._clock = clock

    async def on_click(self, body: dict[str, Any]) -> None:
        """Called after the click was acked."""
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
        approved = match.group(1) == "approve"
        # The display name is a mention, so the engine's sentences name people the Slack way.
        actor = Actor(id=user_id, name=messages.mention(user_id))
        target = ReplyTarget(team_id=team_id, channel=channel, thread_ts=str(thread_ts) if thread_ts else None)
        replies = ClickReplies(
            show=lambda row: self._show(target, message_ts, row),
            tell=lambda text: self._ephemeral(target, user_id, text),
            stream=lambda events: self._runner.stream(target, events),
            refusal=self._refusal,
        )
        try:
            await handle_click(
                self._engine, continuation_id=continuation_id, call_id=call_id, approved=approved, actor=actor,
                replies=replies,
            )
        except Exception:
            logger.exception("approval click on %s failed", continuation_id)
            await self._ephemeral(target, user_id, wording.click_failed())

    def _refusal(self, outcome: DecisionOutcome) -> str:
        # The policy's sentence, with Slack mentions for the people who may decide.
        if outcome.status == "not_allowed" and outcome.continuation is not None:
            return self._engine.policy.describe(outcome.continuation.requested_by, mention=messages.mention)
        return outcome.message

    async def _show(self, target: ReplyTarget, message_ts: str, row: ContinuationRow) -> None:
        if not message_ts:
            return
        view = ApprovalView.from_row(row)
        await send_paced(
            lambda: self._client.chat_update(
                channel=target.channel, ts=message_ts, text=approval_text(view), blocks=approval_blocks(view)
            ),
            budget=self._budgets.edit(target.team_id), clock=self._clock,
        )

    async def _ephemeral(self, target: ReplyTarget, user_id: str, text: str) -> None:
        try:
            await self._client.chat_postEphemeral(
                channel=target.channel, user=user_id, text=text,
                **({"thread_ts": target.thread_ts} if target.thread_ts else {}),
            )
        except Exception:
            logger.exception("could not tell %s: %s", user_id, text)
