"""Slack's history door for learning from a channel: conversations.info, history and replies paged on the read budget, messages as ChannelMessages.

Every call goes through SlackWeb.call on the workspace's budget for its method, as adapters/slack/reader.py pages:
conversations.history and conversations.replies on SLACK_HISTORY_TIER's budget and page size (Tier 3, about 50
calls a minute and 200 messages a page; or `limited`, 1 a minute and 15), the others on their own tier's. A 429
pauses that budget for its Retry-After and the call is tried again; the budget learns either way.

Permalinks are made in Slack's documented form (`<team URL>archives/<channel>/p<ts without the dot>`, with
`?thread_ts=…&cid=…` for a reply) from auth.test's `url`, asked once per token: one call per workspace instead of
a chat.getPermalink per cited message. chat.getPermalink (Tier 4, through the door) is the fallback when
auth.test gives no URL."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timezone
from typing import Any

from adapters.streaming.transport import PermanentSendError
from core.config import Settings
from core.learning.model import ChannelInfo, ChannelMessage, HistoryPage, LearningRefused

from .budgets import ScaledClock, SlackBudgets
from .channel_people import SlackPeople
from .reader import BotIdentity
from .settings import SlackSettings
from .team_clients import TeamClients
from .team_tokens import OneTeamToken
from .transport import SlackWeb

# Slack recommends pages of no more than 200 messages (the limited tier's 15 caps it further).
PAGE_SIZE = 200
# Message subtypes that are someone writing (the rest are joins, topics, pins… and a deleted root's tombstone).
WRITTEN_SUBTYPES = frozenset({"file_share", "thread_broadcast", "bot_message", "me_message"})
# Slack's errors that mean the bot cannot read the channel: what the admin is told to do.
UNREADABLE = frozenset({"not_in_channel", "channel_not_found"})


class SlackChannelHistory:
    """Implements core.learning.ports.ChannelHistory for Slack."""

    def __init__(self, web: SlackWeb, people: SlackPeople) -> None:
        self._web = web
        self._people = people

    async def info(self, workspace: str, channel: str) -> ChannelInfo:
        """conversations.info: DMs and group DMs refused, and a channel the bot is not in, with what to do."""
        found = await self._call(workspace, "conversations.info", budget="other", channel=channel)
        conversation = found.get("channel") or {}
        if conversation.get("is_im") or conversation.get("is_mpim"):
            raise LearningRefused("Direct messages and group DMs are never learned from; choose a channel.")
        name = str(conversation.get("name") or channel)
        if conversation.get("is_member") is False:
            raise LearningRefused(await self._invite(workspace, f"#{name}"))
        return ChannelInfo(name=name, private=bool(conversation.get("is_private")))

    async def history(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        """conversations.history: top-level messages (and every thread's root) newer than `oldest`, newest first."""
        response = await self._call(
            workspace, "conversations.history", channel=channel, oldest=f"{oldest.timestamp():.6f}",
            limit=self._page_size(), **({"cursor": cursor} if cursor else {}),
        )
        return await self._page(workspace, channel, response)

    async def threads(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        """Slack lists every thread's root in history: nothing else to read."""
        return HistoryPage(messages=())

    async def replies(self, workspace: str, channel: str, thread: str, *, cursor: str) -> HistoryPage:
        """conversations.replies: the thread's root and replies, oldest first."""
        response = await self._call(
            workspace, "conversations.replies", channel=channel, ts=thread, limit=self._page_size(),
            **({"cursor": cursor} if cursor else {}),
        )
        return await self._page(workspace, channel, response)

    async def permalink(self, workspace: str, channel: str, message: ChannelMessage) -> str:
        if message.permalink:
            return message.permalink
        base = await self._team_url(workspace)
        if base:
            return link(base, channel, message.id, message.thread)
        response = await self._web.call(workspace, "chat.getPermalink", budget=self._web.budgets.other(
            workspace, "chat.getPermalink"), channel=channel, message_ts=message.id)
        return str(response.get("permalink") or "")

    async def message(self, workspace: str, channel: str, raw: dict[str, Any]) -> ChannelMessage | None:
        """One message as Slack sends it (history, replies, an event), or None for a join, a topic, a tombstone."""
        subtype = raw.get("subtype")
        if (subtype is not None and subtype not in WRITTEN_SUBTYPES) or not raw.get("ts"):
            return None
        bot = await self._bot(workspace)
        by_bot = is_by_bot(raw, bot)
        user = str(raw.get("user") or "")
        if by_bot or not user:
            profile = raw.get("bot_profile")
            name = str(raw.get("username") or (profile.get("name") if isinstance(profile, dict) else "") or "a bot")
        else:
            profile = raw.get("user_profile")
            if isinstance(profile, dict):
                self._people.note(workspace, user, profile)
            name = await self._people.name(workspace, user)
        base = await self._team_url(workspace)
        message = to_message(raw, author_name=name, by_bot=by_bot, team_url=base, channel=channel)
        return dataclasses.replace(message, to_bot=mentions(raw, bot)) if not by_bot else message

    async def _page(self, workspace: str, channel: str, response: dict[str, Any]) -> HistoryPage:
        raws = [dict(m) for m in response.get("messages") or () if isinstance(m, dict)]
        # The page's people are looked up together (each once, cached): a page never waits on them one by one.
        bot = await self._bot(workspace)
        people = {str(m["user"]) for m in raws if m.get("user") and not is_by_bot(m, bot)}
        await asyncio.gather(*(self._people.person(workspace, user) for user in people))
        mapped = [await self.message(workspace, channel, raw) for raw in raws]
        cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
        return HistoryPage(messages=tuple(m for m in mapped if m is not None), next_cursor=cursor)

    async def _call(self, workspace: str, method: str, *, budget: str = "read", **arguments: Any) -> dict[str, Any]:
        """One paced call; the errors that mean the bot cannot read the channel become the admin's sentence."""
        paced = self._web.budgets.read(workspace, method) if budget == "read" else self._web.budgets.other(workspace, method)
        try:
            return await self._web.call(workspace, method, budget=paced, **arguments)
        except PermanentSendError as exc:
            code = str(getattr(exc, "code", ""))
            if code == "missing_scope":
                raise LearningRefused(f"The Slack app lacks a scope {method} needs (channels:history, groups:history, "
                                      "channels:read, groups:read): reinstall it from the current manifest.") from exc
            if code not in UNREADABLE:
                raise
            raise LearningRefused(await self._invite(workspace, f"<#{arguments.get('channel')}>")) from exc

    async def _invite(self, workspace: str, channel: str) -> str:
        bot = str((await self._web.identity(workspace)).get("user") or "relaybot")
        return (f"The bot cannot read {channel}: invite @{bot} to {channel} first (`/invite @{bot}` in the channel), "
                "then choose it again.")

    def _page_size(self) -> int:
        return min(PAGE_SIZE, self._web.budgets.page_messages)

    async def _bot(self, workspace: str) -> BotIdentity:
        auth = await self._web.identity(workspace)
        return BotIdentity(user_id=str(auth.get("user_id") or ""), bot_id=str(auth.get("bot_id") or ""))

    async def _team_url(self, workspace: str) -> str:
        return str((await self._web.identity(workspace)).get("url") or "")


class SeveralWorkspacesHistory:
    """Several workspaces and no SLACK_BOT_TOKEN: the CLI opens no stored install's token; each read says so and
    what to do (the running bot reads the channel's history when it starts learning from it)."""

    SENTENCE = ("With several workspaces the CLI reads no Slack channel itself (SLACK_BOT_TOKEN is not set): "
                "choose the channel with /relaybot in it, or give the channel's id.")

    async def info(self, workspace: str, channel: str) -> ChannelInfo:
        raise LearningRefused(self.SENTENCE)

    async def history(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        raise LearningRefused(self.SENTENCE)

    async def threads(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        return HistoryPage(messages=())

    async def replies(self, workspace: str, channel: str, thread: str, *, cursor: str) -> HistoryPage:
        raise LearningRefused(self.SENTENCE)

    async def permalink(self, workspace: str, channel: str, message: ChannelMessage) -> str:
        return message.permalink


def cli_channel_history(settings: Settings) -> SlackChannelHistory | SeveralWorkspacesHistory | None:
    """The CLI's door to a channel (`relaybot sources add-channel`) with SLACK_BOT_TOKEN, paced as the bot's own
    (its history tier, its share); None where Slack is not configured."""
    slack = settings.platform_settings(SlackSettings)
    if not slack.bot_token:
        return SeveralWorkspacesHistory() if slack.multi_workspace else None
    clock = ScaledClock()
    budgets = SlackBudgets(clock=clock, share=slack.rate_share, history_tier=slack.history_tier)
    web = SlackWeb(TeamClients(OneTeamToken(slack.bot_token), base_url=slack.api_url), budgets=budgets, clock=clock)
    return SlackChannelHistory(web, SlackPeople(web))


def is_by_bot(raw: dict[str, Any], bot: BotIdentity) -> bool:
    """A bot, an app, a webhook, or this app's own bot (never learned from)."""
    return bool(bot.wrote(raw) or raw.get("bot_id") or raw.get("app_id") or raw.get("bot_profile")
                or raw.get("subtype") == "bot_message")


def mentions(raw: dict[str, Any], bot: BotIdentity) -> bool:
    """Whether the message mentions this app's bot (`<@U…>`, or `<@U…|name>` as older clients write it)."""
    text = str(raw.get("text") or "")
    return bool(bot.user_id) and (f"<@{bot.user_id}>" in text or f"<@{bot.user_id}|" in text)


def to_message(raw: dict[str, Any], *, author_name: str, by_bot: bool, team_url: str, channel: str) -> ChannelMessage:
    """A Slack message as a ChannelMessage: `thread` its root's ts for a reply, its own for a root with replies."""
    ts = str(raw["ts"])
    thread_ts = str(raw.get("thread_ts") or "")
    replies = int(raw.get("reply_count") or 0)
    thread = thread_ts if thread_ts and thread_ts != ts else ts if (thread_ts == ts or replies) else ""
    files = tuple(str(f.get("name") or f.get("title")) for f in raw.get("files") or ()
                  if isinstance(f, dict) and (f.get("name") or f.get("title")))
    return ChannelMessage(
        id=ts, thread=thread, author_id=str(raw.get("user") or raw.get("bot_id") or ""), author_name=author_name,
        text=str(raw.get("text") or ""), at=datetime.fromtimestamp(float(ts), tz=timezone.utc), by_bot=by_bot,
        reply_count=replies, latest_reply=str(raw.get("latest_reply") or ""), files=files,
        permalink=link(team_url, channel, ts, thread) if team_url else "",
    )


def link(team_url: str, channel: str, ts: str, thread: str) -> str:
    """Slack's documented permalink form; a reply's names its thread and channel."""
    base = f"{team_url.rstrip('/')}/archives/{channel}/p{ts.replace('.', '')}"
    return f"{base}?thread_ts={thread}&cid={channel}" if thread and thread != ts else base
