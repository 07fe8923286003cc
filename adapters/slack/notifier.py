"""What the process's jobs ask of Slack outside a run: mark expired approvals, deliver reminders."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from core.approvals import ApprovalView
from core.requests import ConversationKey

from .buttons import approval_blocks, approval_text
from .render import markdown_text
from .surface import ReplyTarget, SlackSurfaces

logger = logging.getLogger(__name__)


class SlackNotifier:
    """Implements core.notifier.Notifier for Slack."""

    def __init__(self, surfaces: SlackSurfaces) -> None:
        self._surfaces = surfaces

    async def approval_expired(self, *, view: ApprovalView, message_refs: list[dict[str, Any]]) -> None:
        for ref in message_refs:
            if ref.get("platform", "slack") != "slack" or not ref.get("ts"):
                continue
            # A request with many calls was shown in several messages, each showing calls from `first`.
            parts = [{"ts": ref["ts"], "first": 0}, *(part for part in ref.get("parts") or [] if isinstance(part, dict))]
            for part in parts:
                first = int(part.get("first") or 0)
                try:
                    await self._surfaces.update_paced(
                        str(ref.get("team", "")), str(ref["channel"]), str(part["ts"]),
                        text=approval_text(view, first=first), blocks=approval_blocks(view, first=first),
                    )
                except Exception:
                    # One message gone (deleted, channel archived) must not keep the others open.
                    logger.exception("could not mark approval message %s in %s as expired", part.get("ts"), ref.get("channel"))

    async def deliver_reminder(
        self, *, conversation: ConversationKey, user: str, text: str, key: str, attempted_at: datetime | None,
        check_claim: Callable[[], Awaitable[None]],
    ) -> None:
        # The post carries the reminder's key in its metadata: after an attempt whose outcome nobody saw (this
        # process's, or one that died before marking it delivered), it is looked up from then, not posted again.
        target = ReplyTarget(team_id=conversation.workspace, channel=conversation.channel, thread_ts=conversation.thread or None)
        await self._surfaces.post_paced(
            target, post_key=key, attempted_at=None if attempted_at is None else attempted_at.timestamp(),
            before_send=check_claim, markdown_text=markdown_text(text),
        )
