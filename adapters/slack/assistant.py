"""Slack's AI-app pane (Bolt's AsyncAssistant): suggested prompts, a thread title, and the engine answering as in any DM."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncBoltContext
from slack_bolt.context.set_suggested_prompts.async_set_suggested_prompts import AsyncSetSuggestedPrompts
from slack_bolt.middleware.assistant.async_assistant import AsyncAssistant

from adapters import wording
from core.ports import KnownConversations
from core.requests import ConversationKey

from .inbound import SlackInbound
from .reader import BotIdentity
from .surface import PLATFORM
from .transport import SlackWeb

logger = logging.getLogger(__name__)

TITLE_MAX_CHARS = 80


class SlackAssistant:
    """Listeners for Bolt's AsyncAssistant middleware. A message in an assistant thread goes through this
    path only (the middleware does not pass it on to the `message` listener), and is a direct message for
    every rule: the DM policy and allowlists, a conversation per thread (`direct`), scoping."""

    def __init__(self, *, inbound: SlackInbound, conversations: KnownConversations,
                 bot: Callable[[AsyncBoltContext], BotIdentity], web: SlackWeb) -> None:
        self._inbound = inbound
        self._web = web
        self._conversations = conversations
        self._bot = bot

    def middleware(self) -> AsyncAssistant:
        assistant = AsyncAssistant()
        assistant.thread_started(self.on_thread_started)
        assistant.user_message(self.on_user_message)
        # Thread context (the channel the user is looking at) is not used: acked, nothing stored.
        assistant.thread_context_changed(self.on_context_changed)
        return assistant

    async def on_thread_started(self, body: dict[str, Any], set_suggested_prompts: AsyncSetSuggestedPrompts) -> None:
        # Bolt's helper names the thread; the call itself goes through the door (the pane waits: its lane).
        prompts = [{"title": title, "message": message} for title, message in wording.assistant_prompts()]
        try:
            await self._web.now(
                str(body.get("team_id") or ""), "assistant.threads.setSuggestedPrompts",
                channel_id=set_suggested_prompts.channel_id, thread_ts=set_suggested_prompts.thread_ts,
                prompts=prompts, title=wording.assistant_prompts_title(),
            )
        except Exception:
            logger.exception("could not set the suggested prompts of an assistant thread")

    async def on_context_changed(self) -> None:
        return None

    async def on_user_message(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext,
    ) -> None:
        thread_ts, channel = event.get("thread_ts"), event.get("channel")
        if not isinstance(thread_ts, str) or not isinstance(channel, str) or event.get("bot_id") or event.get("subtype"):
            return
        team = str(body.get("team_id") or event.get("team") or "")
        key = ConversationKey(platform=PLATFORM, workspace=team, channel=channel, thread=thread_ts, direct=True)
        question = str(event.get("text") or "").strip()
        if question and not await self._known(key):
            await _quietly(self._web.now(team, "assistant.threads.setTitle", channel_id=channel, thread_ts=thread_ts,
                                         title=_title(question)), "set the title of")
        # As every answer in a thread: inbound shows the status ("is thinking…" and loading messages) at once.
        await self._inbound.on_message(body, event, self._bot(context))

    async def _known(self, key: ConversationKey) -> bool:
        try:
            return await self._conversations.exists(key)
        except Exception:
            logger.exception("could not look up conversation %s", key.thread)
            return True  # no title rather than a second one


def _title(question: str) -> str:
    line = " ".join(question.split())
    return line if len(line) <= TITLE_MAX_CHARS else line[: TITLE_MAX_CHARS - 1] + "…"


async def _quietly(call: Awaitable[Any], what: str) -> None:
    """The pane's decorations never stop an answer (an app without the assistant feature refuses them)."""
    try:
        await call
    except Exception as exc:
        logger.info("could not %s an assistant thread: %s", what, exc)
