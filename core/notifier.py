"""What the core asks of a platform outside a run: edit expired approvals, deliver reminders."""

from __future__ import annotations

from typing import Any, Protocol

from core.requests import ConversationKey


class Notifier(Protocol):
    """Implemented by each adapter; the engine picks one by the conversation's platform."""

    async def approval_expired(self, *, continuation_id: str, message_refs: list[dict[str, Any]]) -> None:
        """Edit the approval messages of a run that expired to say so."""
        ...

    async def deliver_reminder(self, *, conversation: ConversationKey, user: str, text: str) -> None:
        """Post a reminder where it was asked for."""
        ...
