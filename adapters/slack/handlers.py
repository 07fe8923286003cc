"""Slack events → engine requests: mentions, DMs and thread follow-ups, each answered once."""

from __future__ import annotations

import logging
import re
from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from core.config import Settings
from core.engine import Engine
from core.requests import Actor, Attachment, ConversationKey, PriorMessage, Request
from core.store.processed_events import ProcessedEvents

from .answers import PLATFORM, AnswerRunner, ReplyTarget
from .files import download_attachments

logger = logging.getLogger(__name__)

# Earlier thread messages read for a mention mid-thread; the engine trims them to its budget.
THREAD_CONTEXT_MAX_MESSAGES = 200
_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")


class EventHandlers:
    """Bolt listeners; they run after Bolt has acked the event."""

    def __init__(
        self, *, settings: Settings, engine: Engine, processed: ProcessedEvents, runner: AnswerRunner,
        client: AsyncWebClient, session: aiohttp.ClientSession,
    ) -> None:
        self._settings = settings
        self._engine = engine
        self._processed = processed
        self._runner = runner
        self._client = client
        self._session = session

    async def on_app_mention(self, body: dict[str, Any], event: dict[str, Any], bot_user_id: str) -> None:
        if _not_from_a_person(event) or not await self._first_time(body):
            return
        ts = str(event["ts"])
        thread_ts = str(event.get("thread_ts") or ts)
        team_id = _team(body, event)
        context: tuple[PriorMessage, ...] = ()
        if thread_ts != ts:
            context = await self._thread_context(str(event["channel"]), thread_ts, before_ts=ts)
        key = ConversationKey(platform=PLATFORM, workspace=team_id, channel=str(event["channel"]), thread=thread_ts)
        await self._answer(event, key=key, target=ReplyTarget(team_id=team_id, channel=key.channel, thread_ts=thread_ts),
                           bot_user_id=bot_user_id, context=context)

    async def on_message(self, body: dict[str, Any], event: dict[str, Any], bot_user_id: str) -> None:
        if _not_from_a_person(event) or event.get("user") == bot_user_id:
            return
        channel = str(event.get("channel", ""))
        team_id = _team(body, event)
        thread_ts = event.get("thread_ts")
        if event.get("channel_type") == "im":
            # Top-level DMs are one rolling conversation; a thread in a DM is its own.
            if not await self._first_time(body):
                return
            key = ConversationKey(platform=PLATFORM, workspace=team_id, channel=channel, thread=str(thread_ts or ""))
            target = ReplyTarget(team_id=team_id, channel=channel, thread_ts=str(thread_ts) if thread_ts else None)
            await self._answer(event, key=key, target=target, bot_user_id=bot_user_id)
            return
        # A channel message: only follow-ups in threads the bot already answers, without a mention
        # (a mention arrives as app_mention too and is answered there).
        if not self._settings.slack_thread_followups or not thread_ts or thread_ts == event.get("ts"):
            return
        if bot_user_id and f"<@{bot_user_id}" in str(event.get("text", "")):
            return
        if not await self._first_time(body):
            return
        key = ConversationKey(platform=PLATFORM, workspace=team_id, channel=channel, thread=str(thread_ts))
        if await self._engine.conversations.find(key) is None:
            return
        await self._answer(event, key=key, target=ReplyTarget(team_id=team_id, channel=channel, thread_ts=str(thread_ts)),
                           bot_user_id=bot_user_id)

    async def _first_time(self, body: dict[str, Any]) -> bool:
        event_id = str(body.get("event_id") or "")
        if not event_id:
            return True
        if await self._processed.first_time(PLATFORM, event_id):
            return True
        logger.info("Slack event %s was already taken (redelivery or another instance)", event_id)
        return False

    async def _answer(
        self, event: dict[str, Any], *, key: ConversationKey, target: ReplyTarget, bot_user_id: str,
        context: tuple[PriorMessage, ...] = (),
    ) -> None:
        text = str(event.get("text", ""))
        question = _MENTION.sub(lambda m: "" if m.group(1) == bot_user_id else m.group(0), text).strip() or text
        attachments: tuple[Attachment, ...] = ()
        if event.get("files"):
            attachments = await download_attachments(
                self._session, list(event["files"]), bot_token=self._settings.slack_bot_token or "",
                api_url=self._settings.slack_api_url,
            )
        request = Request(
            question=question, conversation=key, user=Actor(id=str(event.get("user", ""))),
            attachments=attachments, thread_context=context,
            platform_refs={"team": target.team_id, "channel": target.channel, "ts": str(event.get("ts", ""))},
        )
        await self._runner.stream(target, self._engine.ask(request))

    async def _thread_context(self, channel: str, thread_ts: str, *, before_ts: str) -> tuple[PriorMessage, ...]:
        try:
            response = await self._client.conversations_replies(
                channel=channel, ts=thread_ts, limit=THREAD_CONTEXT_MAX_MESSAGES
            )
        except Exception:
            logger.exception("could not read thread %s in %s; answering without it", thread_ts, channel)
            return ()
        prior = []
        for message in response.get("messages", []):
            if float(message.get("ts", 0)) >= float(before_ts) or not str(message.get("text", "")).strip():
                continue
            is_bot = bool(message.get("bot_id"))
            author = str(message.get("user") or message.get("bot_id") or "someone")
            prior.append(PriorMessage(author=author, text=str(message["text"]), is_bot=is_bot))
        return tuple(prior)


def _not_from_a_person(event: dict[str, Any]) -> bool:
    """Bots, edits, joins and every other subtype are not questions (file shares are)."""
    subtype = event.get("subtype")
    return bool(event.get("bot_id")) or (subtype is not None and subtype != "file_share") or not event.get("user")


def _team(body: dict[str, Any], event: dict[str, Any]) -> str:
    return str(body.get("team_id") or event.get("team") or "")
