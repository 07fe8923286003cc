"""What the engine asks of Slack outside a run: mark expired approvals, deliver reminders."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from core.engine import Engine
from core.requests import ConversationKey

from .approval_blocks import ApprovalView, approval_blocks, approval_text
from .budgets import ScaledClock, SlackBudgets
from .rendering import message_text
from .transport import send_paced

logger = logging.getLogger(__name__)


class SlackNotifier:
    """Implements core.notifier.Notifier for Slack."""

    def __init__(self, *, client: AsyncWebClient, engine: Engine, budgets: SlackBudgets, clock: ScaledClock) -> None:
        self._client = client
        self._engine = engine
        self._budgets = budgets
        self._clock = clock

    async def approval_expired(self, *, continuation_id: str, message_refs: list[dict[str, Any]]) -> None:
        row = await self._engine.continuations.get(uuid.UUID(continuation_id))
        if row is None:
            return
        view = ApprovalView.from_row(row)
        view = ApprovalView(continuation_id=view.continuation_id, requested_by=view.requested_by, calls=view.calls,
                            decisions=view.decisions, state="expired")
        for ref in message_refs:
            if ref.get("platform", "slack") != "slack" or not ref.get("ts"):
                continue
            team, channel, ts = str(ref.get("team", "")), str(ref["channel"]), str(ref["ts"])
            await send_paced(
                lambda: self._client.chat_update(
                    channel=channel, ts=ts, text=approval_text(view), blocks=approval_blocks(view)
                ),
                budget=self._budgets.edit(team), clock=self._clock,
            )

    async def deliver_reminder(self, *, conversation: ConversationKey, user: str, text: str) -> None:
        await send_paced(
            lambda: self._client.chat_postMessage(
                channel=conversation.channel, thread_ts=conversation.thread or None, text=message_text(text),
            ),
            budget=self._budgets.post(conversation.workspace, conversation.channel), clock=self._clock,
        )
