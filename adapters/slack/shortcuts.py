"""Slack's message shortcuts "Ask relaybot about this" (in the thread, or privately) and "Summarise this thread": the thread read as read_conversation reads it, answered in it or only to the asker."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncBoltContext
from slack_sdk.errors import SlackApiError

from adapters import wording
from adapters.answers import AnswerRunner
from adapters.gate import EventNotRecorded, Gate
from adapters.policy import THREAD_CONTEXT_MAX_MESSAGES
from adapters.streaming import CONNECTION_ERRORS, RateLimited, TransientSendError
from core.engine import Engine
from core.requests import Actor, ConversationKey, PriorMessage, Request
from core.tokens import get_token_counter
from core.tools.read_conversation import render_messages

from . import wording as slack_wording
from .controls import MessageShortcut, read_shortcut
from .inbound import SlackAccess
from .private_answers import NOT_A_MEMBER_ERRORS, PRIVATE_THREAD_PREFIX, PrivateAnswers, PrivatePlace, ResponseUrl
from .reader import BotIdentity, SlackReader
from .surface import PLATFORM, ReplyTarget, SlackSurfaces

logger = logging.getLogger(__name__)

# The callback ids of slack-app-manifest.yaml's message shortcuts.
ASK_SHORTCUT = "relaybot_ask_about"
ASK_PRIVATELY_SHORTCUT = "relaybot_ask_privately"
SUMMARISE_SHORTCUT = "relaybot_summarise_thread"
_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")


class SlackShortcuts:
    """Acked at once; the message's thread read through the reader read_conversation uses (conversations.replies),
    rendered as that tool renders it, into the question. Where the bot cannot read the thread (not in the
    conversation), the answer is private, from the message alone, and says why; a summary is only the sentence."""

    def __init__(
        self, *, engine: Engine, runner: AnswerRunner, surfaces: SlackSurfaces, gate: Gate, access: SlackAccess,
        reader: SlackReader, private: PrivateAnswers,
    ) -> None:
        self._engine = engine
        self._runner = runner
        self._surfaces = surfaces
        self._gate = gate
        self._access = access
        self._reader = reader
        self._private = private
        self._counter = get_token_counter()  # as read_conversation counts what it shows

    async def on_ask(self, ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await self._take(ack, body, context, summarise=False, private=False)

    async def on_ask_privately(self, ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await self._take(ack, body, context, summarise=False, private=True)

    async def on_summarise(self, ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await self._take(ack, body, context, summarise=True, private=False)

    async def _take(
        self, ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext, *, summarise: bool, private: bool,
    ) -> None:
        await ack()
        with self._gate.track():
            shortcut = read_shortcut(body)
            user, channel, message = shortcut.user_id, shortcut.channel, shortcut.message
            team = str((body.get("team") or {}).get("id") or (shortcut.teams[0] if shortcut.teams else ""))
            url = self._private.url(str(body.get("response_url") or ""))
            if not user or not channel or not message.get("ts"):
                logger.warning("ignoring a message shortcut without its user, channel or message")
                return
            refusal = self._refusal(shortcut)
            if refusal:
                await url.tell(refusal)
                return
            try:
                if not await self._gate.first_time(f"shortcut:{body.get('trigger_id') or ''}"):
                    return
            except EventNotRecorded:
                logger.warning("a message shortcut could not be recorded (database down); telling the asker")
                await url.tell(wording.database_unreachable())
                return
            root = str(message.get("thread_ts") or message["ts"])
            bot = BotIdentity(user_id=context.bot_user_id or "", bot_id=context.bot_id or "")
            thread = await self._read(team, channel, root, bot, url)
            if thread is False:
                return
            if summarise and thread is None:
                await url.tell(wording.thread_unreadable_to_summarise())
                return
            question = self._question(shortcut, bot, thread, summarise=summarise)
            if private or thread is None:
                note = wording.thread_unreadable_answered_privately() if thread is None else ""
                await self._answer_privately(body, shortcut, team, question, url, note=note)
            else:
                self._answer_in_thread(shortcut, team, root, question)

    async def _answer_privately(
        self, body: dict[str, Any], shortcut: MessageShortcut, team: str, question: str, url: ResponseUrl, *, note: str,
    ) -> None:
        """Two ephemerals through the shortcut's response_url, "Thinking…" and the answer: its "original" is the message
        it was used on, never to be replaced. No reminder, no reading back (as `/ask private:`)."""
        user, channel = shortcut.user_id, shortcut.channel
        place = PrivatePlace(team_id=team, channel=channel, user=user, response_url=str(body.get("response_url") or ""),
                             replaces=False, decides_in_dm=self._access.person(user, shortcut.teams, direct=True) == "allowed")
        key = ConversationKey(platform=PLATFORM, workspace=team, channel=channel, direct=channel.startswith("D"),
                              thread=f"{PRIVATE_THREAD_PREFIX}{body.get('trigger_id') or ''}")
        request = Request(question=question, conversation=key, user=Actor(id=user), reaches=frozenset())
        await self._private.play(self._engine.ask(request), place, url, placeholder=wording.private_thinking(), note=note)

    def _answer_in_thread(self, shortcut: MessageShortcut, team: str, root: str, question: str) -> None:
        """As a mention in that thread is answered: the thread's conversation, its follow-ups answered after."""
        channel = shortcut.channel
        key = ConversationKey(platform=PLATFORM, workspace=team, channel=channel, thread=root, direct=channel.startswith("D"))
        target = ReplyTarget(team_id=team, channel=channel, thread_ts=root, recipient_user=shortcut.user_id,
                             recipient_team=(shortcut.teams[0] if shortcut.teams else team) or None)
        request = Request(question=question, conversation=key, user=Actor(id=shortcut.user_id))
        self._runner.submit(self._engine.ask(request), self._surfaces.at(target))

    async def _read(
        self, team: str, channel: str, root: str, bot: BotIdentity, url: ResponseUrl,
    ) -> list[PriorMessage] | None | bool:
        """The thread's messages; None where the bot is not in the conversation; False when the asker was told it
        could not be read now."""
        try:
            return await self._reader.thread(team, channel, root, limit=THREAD_CONTEXT_MAX_MESSAGES, bot=bot)
        except SlackApiError as exc:
            error = str(exc.response.get("error", "")) if exc.response is not None else ""
            if error in NOT_A_MEMBER_ERRORS:
                return None
            logger.warning("could not read thread %s in %s for a shortcut: %s", root, channel, error or exc)
        except (RateLimited, TransientSendError, *CONNECTION_ERRORS) as exc:
            logger.warning("could not read thread %s in %s for a shortcut: %r", root, channel, exc)
        await url.tell(wording.thread_read_failed())
        return False

    def _question(
        self, shortcut: MessageShortcut, bot: BotIdentity, thread: list[PriorMessage] | None, *, summarise: bool,
    ) -> str:
        """The message (or the summary asked for), then the thread as read_conversation shows it to the model."""
        message = shortcut.message
        if summarise:
            question = wording.summarise_request()
        else:
            text = _MENTION.sub(lambda m: "" if m.group(1) == bot.user_id else m.group(0), str(message.get("text") or ""))
            author = "me" if bot.wrote(message) else slack_wording.mention(str(message.get("user") or "someone"))
            question = wording.about_message(author, text.strip())
        if not thread:
            return question
        rendered = render_messages(thread, scope="thread", max_tokens=self._engine.settings.read_conversation_max_tokens,
                                   counter=self._counter)
        return f"{question}\n\n{rendered}"

    def _refusal(self, shortcut: MessageShortcut) -> str:
        access = self._access.person(shortcut.user_id, shortcut.teams, direct=shortcut.channel.startswith("D"))
        if access == "direct_messages_off":
            return wording.direct_messages_off()
        if access == "refused":
            return wording.ask_not_allowed()
        return ""


def registrations(shortcuts: SlackShortcuts) -> dict[str, Callable[..., Any]]:
    """What SlackAdapter registers: each shortcut's callback id and its handler."""
    return {
        ASK_SHORTCUT: shortcuts.on_ask,
        ASK_PRIVATELY_SHORTCUT: shortcuts.on_ask_privately,
        SUMMARISE_SHORTCUT: shortcuts.on_summarise,
    }
