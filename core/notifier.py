"""What the process's jobs ask of a platform outside a run: edit expired approvals, deliver reminders."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol

from core.approvals import ApprovalView
from core.requests import ConversationKey


class ClaimLost(Exception):
    """The reminder's claim passed to another process (this one's heartbeat went stale): it posts nothing more."""


class Notifier(Protocol):
    """Implemented by each adapter; the process's jobs pick one by the platform of the row."""

    async def approval_expired(self, *, view: ApprovalView, message_refs: list[dict[str, Any]]) -> None:
        """Edit the messages that showed an approval to say it expired (buttons gone)."""
        ...

    async def deliver_reminder(
        self, *, conversation: ConversationKey, user: str, text: str, key: str, attempted_at: datetime | None,
        check_claim: Callable[[], Awaitable[None]],
    ) -> None:
        """Post a reminder where it was asked for, exactly once.

        `key` ("reminder:<id>") names this reminder's post. `attempted_at` is when an earlier claim (this process's
        or a dead one's) first tried to post it, its outcome unknown: the post is then looked up from that time
        (less the platform's skew margin) and not sent again if found. `check_claim` is awaited right before each
        post attempt (after its rate budget's wait): it raises ClaimLost once another process holds the claim."""
        ...
