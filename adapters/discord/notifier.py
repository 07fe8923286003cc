"""What the process's jobs ask of Discord outside a run (core.notifier.Notifier): mark expired approvals, deliver reminders."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import discord

from adapters.streaming import Clock
from core.approvals import ApprovalView
from core.requests import ConversationKey

from . import render
from .render import ApprovalPart
from .surface import edit_approval
from . import transport_calls as calls
from .transport import NO_PINGS, DiscordBudgets, part_nonce
from .transport_lookup import PostOnce
from .wording import mention

log = logging.getLogger(__name__)


class DiscordNotifier:
    """Redraws expired approval messages (the note, every button disabled) and posts reminders."""

    def __init__(self, *, client: Callable[[], discord.Client | None], budgets: DiscordBudgets, clock: Clock) -> None:
        self._client = client
        self._budgets = budgets
        self._clock = clock

    async def approval_expired(self, *, view: ApprovalView, message_refs: list[dict[str, Any]]) -> None:
        client = self._client()
        if client is None:
            return
        for ref in message_refs:
            # Refs written before the platform was recorded are Discord's only in a Discord process.
            if ref.get("platform", "discord") != "discord" or "message_id" not in ref:
                continue
            channel_id = int(ref["channel_id"])
            channel = client.get_partial_messageable(channel_id)
            # A request with many calls was shown in several messages (`parts` beyond the first).
            for shown in [ref, *(part for part in ref.get("parts") or () if isinstance(part, dict))]:
                message_id = int(shown["message_id"])
                message = channel.get_partial_message(message_id)
                try:
                    await edit_approval(message, view, _part(view, shown), budget=self._budgets(channel_id), clock=self._clock)
                except Exception:
                    # One message that cannot be edited must not keep the others showing live buttons.
                    log.exception("could not mark approval message %s as expired", message_id)

    async def deliver_reminder(
        self, *, conversation: ConversationKey, user: str, text: str, key: str, attempted_at: datetime | None,
        check_claim: Callable[[], Awaitable[None]],
    ) -> None:
        client = self._client()
        if client is None:
            raise RuntimeError("Discord is not connected")
        channel_id = int(conversation.thread if conversation.thread.isdigit() else conversation.channel)
        channel = client.get_partial_messageable(channel_id)
        named = mention(user)
        content = text if named in text else f"{named} {text}"
        # The reminder is for this one user: ping them, never anyone else.
        pings = (
            discord.AllowedMentions(everyone=False, roles=False, users=[discord.Object(int(user))])
            if user.isdigit()
            else NO_PINGS
        )
        content = content[: render.MAX_CONTENT_CHARS]
        # An earlier attempt whose outcome nobody saw (this process's, or one that died before marking it
        # delivered) is looked up by its text from then; the reminder's own nonce covers Discord's few minutes.
        await calls.post_message(
            channel, budget=self._budgets(channel_id), clock=self._clock, nonce=part_nonce(key),
            once=PostOnce(channel, attempted_at=attempted_at), before_send=check_claim, content=content,
            allowed_mentions=pings,
        )


def _part(view: ApprovalView, shown: dict[str, Any]) -> ApprovalPart:
    """The calls a remembered message shows; a message from before approvals had parts shows the first part."""
    if "first" in shown and "count" in shown:
        return ApprovalPart(first=int(shown["first"]), count=int(shown["count"]))
    return render.approval_parts(view.calls)[0]
