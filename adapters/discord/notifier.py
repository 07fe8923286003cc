"""What the engine asks of Discord outside a run: mark expired approvals, deliver reminders."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import discord

from adapters.streaming import Clock
from core.requests import ConversationKey

from . import rendering
from .approvals import approval_view
from .transport import NO_PINGS, ChannelBudgets, send_reliably

log = logging.getLogger(__name__)


class DiscordNotifier:
    """Edits expired approval messages ("⌛ expired", buttons disabled) and posts reminders."""

    def __init__(self, *, client: Callable[[], discord.Client | None], budgets: ChannelBudgets, clock: Clock) -> None:
        self._client = client
        self._budgets = budgets
        self._clock = clock

    async def approval_expired(self, *, continuation_id: str, message_refs: list[dict[str, Any]]) -> None:
        client = self._client()
        if client is None:
            return
        for ref in message_refs:
            if ref.get("platform", "discord") != "discord" or "message_id" not in ref:
                continue
            channel_id, message_id = int(ref["channel_id"]), int(ref["message_id"])
            message = client.get_partial_messageable(channel_id).get_partial_message(message_id)
            content = rendering.expired_text(str(ref.get("text") or ""))
            view = approval_view(continuation_id, int(ref.get("calls") or 1), closed=True)
            try:
                await send_reliably(
                    self._budgets(channel_id),
                    lambda: message.edit(content=content, view=view, allowed_mentions=NO_PINGS),
                    clock=self._clock,
                )
            except Exception:
                log.exception("could not mark approval message %s as expired", message_id)

    async def deliver_reminder(self, *, conversation: ConversationKey, user: str, text: str) -> None:
        client = self._client()
        if client is None:
            raise RuntimeError("Discord is not connected")
        channel_id = int(conversation.thread if conversation.thread.isdigit() else conversation.channel)
        channel = client.get_partial_messageable(channel_id)
        mention = f"<@{user}>"
        content = text if mention in text else f"{mention} {text}"
        # The reminder is for this one user: ping them, never anyone else.
        pings = discord.AllowedMentions(everyone=False, roles=False, users=[discord.Object(int(user))]) if user.isdigit() else NO_PINGS
        await send_reliably(
            self._budgets(channel_id),
            lambda: channel.send(content[: rendering.MAX_CONTENT_CHARS], allowed_mentions=pings),
            clock=self._clock,
        )
