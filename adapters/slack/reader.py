"""Reading a Slack thread or channel for thread context and read_conversation: paged, budgeted, 429s waited out.

conversations.replies and conversations.history, cursor-paged, each call on the workspace's read budget
for its method (a 429 pauses it for its Retry-After and the call is tried again)."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from slack_sdk.errors import SlackApiError

from adapters.streaming import CONNECTION_ERRORS, RateLimited, TransientSendError
from core.requests import ConversationKey, PriorMessage
from core.tools.context import ConversationUnreadable, ReadScope

from .transport import SlackWeb

logger = logging.getLogger(__name__)

# Slack recommends pages of no more than 200 messages.
PAGE_SIZE = 200
# conversations.replies only pages oldest first: a longer thread is paged through (keeping the newest)
# up to this many pages, so one read never costs more than this many calls.
MAX_PAGES = 10


@dataclass(frozen=True, kw_only=True)
class BotIdentity:
    """This app's bot in the workspace (from Bolt's context, or auth.test): its user id and its bot id."""

    user_id: str
    bot_id: str = ""

    def wrote(self, message: dict[str, Any]) -> bool:
        return bool(
            (self.bot_id and message.get("bot_id") == self.bot_id) or (self.user_id and message.get("user") == self.user_id)
        )

    def prior(self, message: dict[str, Any]) -> PriorMessage:
        """A Slack message as read: only this bot's own words count as its own; other bots, apps and
        webhooks are quoted like people, so what they say cannot pass for the bot's."""
        text = str(message.get("text", ""))
        at = _time(message.get("ts"))
        if self.wrote(message):
            return PriorMessage(author=self.user_id or self.bot_id, text=text, is_bot=True, is_self=True, at=at)
        profile = message.get("bot_profile")
        is_bot = bool(message.get("bot_id") or message.get("app_id") or profile or message.get("subtype") == "bot_message")
        name = message.get("username") or (profile.get("name") if isinstance(profile, dict) else None)
        author = str(message.get("user") or name or message.get("bot_id") or "someone")
        return PriorMessage(author=author, text=text, is_bot=is_bot, at=at)


class SlackReader:
    """Implements core.tools.context.ConversationReader for Slack; inbound reads thread context with `thread`."""

    def __init__(self, *, web: SlackWeb, identity: Callable[[str], BotIdentity]) -> None:
        self._web = web
        self._identity = identity  # the bot of a team, learnt from auth.test (at start, or at the team's first event)

    async def read(self, conversation: ConversationKey, *, scope: ReadScope, limit: int) -> list[PriorMessage]:
        """A DM's top level has no thread: its "thread" is the DM itself."""
        bot = self._identity(conversation.workspace)
        team, channel = conversation.workspace, conversation.channel
        try:
            if scope == "thread" and conversation.thread:
                return await self.thread(team, channel, conversation.thread, limit=limit, bot=bot)
            return await self.channel(team, channel, limit=limit, bot=bot)
        except (SlackApiError, RateLimited, TransientSendError, *CONNECTION_ERRORS) as error:
            logger.warning("could not read %s of %s: %r", scope, channel, error)
            raise ConversationUnreadable("failed") from error

    async def thread(
        self, team_id: str, channel: str, thread_ts: str, *, limit: int, bot: BotIdentity, before_ts: str | None = None
    ) -> list[PriorMessage]:
        """The newest `limit` messages with text of a thread, its root included, oldest first; only those
        before `before_ts` when given."""
        params: dict[str, Any] = {"channel": channel, "ts": thread_ts}
        if before_ts is not None:
            params["latest"] = before_ts  # exclusive
        kept: deque[PriorMessage] = deque(maxlen=limit)
        seen: set[str] = set()
        async for message in self._pages("conversations.replies", team_id, params):
            ts = str(message.get("ts", ""))
            # Slack repeats the thread's root at the top of every page.
            if ts in seen or (before_ts is not None and float(ts or 0) >= float(before_ts)):
                continue
            seen.add(ts)
            if str(message.get("text", "")).strip():
                kept.append(bot.prior(message))
        return list(kept)

    async def channel(self, team_id: str, channel: str, *, limit: int, bot: BotIdentity) -> list[PriorMessage]:
        """The newest `limit` top-level messages with text of a channel (or DM), oldest first."""
        newest_first: list[PriorMessage] = []
        async for message in self._pages("conversations.history", team_id, {"channel": channel}):
            if str(message.get("text", "")).strip():
                newest_first.append(bot.prior(message))
            if len(newest_first) >= limit:
                break
        return newest_first[::-1]

    async def _pages(self, method: str, team_id: str, params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The method's messages page by page (cursor paging), each call on the workspace's budget for the
        method: a 429 pauses that budget for its Retry-After, and the call is tried again."""
        budget = self._web.budgets.read(team_id, method)
        size = min(PAGE_SIZE, self._web.budgets.page_messages)
        cursor = ""
        for _ in range(MAX_PAGES):
            page = {**params, "limit": size, **({"cursor": cursor} if cursor else {})}
            response = await self._web.call(team_id, method, budget=budget, **page)
            for message in response.get("messages") or ():
                yield message
            cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                return


def _time(ts: Any) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(ts), tz=timezone.utc)
    except (TypeError, ValueError):
        return None
