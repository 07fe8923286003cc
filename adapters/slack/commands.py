"""Slack's `/ask`: acked at once, the question posted in the channel and answered in its thread, or a clear reply where the bot is not a member."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncRespond
from slack_sdk.errors import SlackApiError

from adapters import wording
from adapters.answers import AnswerRunner
from adapters.gate import EventNotRecorded, Gate
from core.engine import Engine
from core.requests import Actor, ConversationKey, Request

from . import wording as slack_wording
from .inbound import SlackAccess
from .render import MAX_MESSAGE_TEXT_CHARS, fit, safe_markdown, sentence
from .surface import PLATFORM, ReplyTarget, SlackSurfaces

logger = logging.getLogger(__name__)

COMMAND = "/ask"
# Slack's answers when the bot may not post in a conversation (not invited; a private channel or a DM it is not in).
NOT_A_MEMBER_ERRORS = frozenset({"not_in_channel", "channel_not_found", "is_archived"})


class SlackCommands:
    """Bolt's listener for `/ask`, answered like a mention: the question is posted where it was asked, so
    everyone sees what the answer in its thread answers (as Discord shows its `/ask`)."""

    def __init__(
        self, *, engine: Engine, runner: AnswerRunner, surfaces: SlackSurfaces, gate: Gate, access: SlackAccess
    ) -> None:
        self._engine = engine
        self._runner = runner
        self._surfaces = surfaces
        self._gate = gate
        self._access = access

    async def on_ask(self, ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond) -> None:
        # Acked first: Slack shows an error when a command is not acknowledged within 3 s.
        await ack()
        with self._gate.track():
            user, channel = str(body.get("user_id") or ""), str(body.get("channel_id") or "")
            team = str(body.get("team_id") or "")
            question = str(body.get("text") or "").strip()
            if not user or not channel:
                logger.warning("ignoring a /ask without user or channel")
                return
            if not question:
                await _tell(respond, wording.ask_usage())
                return
            direct = channel.startswith("D")
            access = self._access.person(user, (team,) if team else (), direct=direct)
            if access != "allowed":
                await _tell(respond, wording.direct_messages_off() if access == "direct_messages_off"
                            else wording.direct_messages_members_only() if direct else wording.ask_not_allowed())
                return
            # Slack does not retry commands, but two processes must never both take one.
            try:
                if not await self._gate.first_time(f"command:{body.get('trigger_id') or ''}"):
                    return
            except EventNotRecorded:
                # Nothing redelivers a command: the asker hears why now rather than never.
                logger.warning("a /ask could not be recorded (database down); telling the asker", exc_info=True)
                await _tell(respond, wording.database_unreachable())
                return
            shown = fit(sentence(wording.asked(slack_wording.mention(user), safe_markdown(question))), MAX_MESSAGE_TEXT_CHARS)
            try:
                posted = await self._surfaces.post_paced(ReplyTarget(team_id=team, channel=channel, thread_ts=None),
                                                         markdown_text=shown)
            except SlackApiError as exc:
                error = str(exc.response.get("error", "")) if exc.response is not None else ""
                if error in NOT_A_MEMBER_ERRORS:
                    await _tell(respond, wording.ask_not_a_member())
                    return
                raise
            thread_ts = str(posted["ts"])
            key = ConversationKey(platform=PLATFORM, workspace=team, channel=channel, thread=thread_ts, direct=direct)
            target = ReplyTarget(team_id=team, channel=channel, thread_ts=thread_ts, recipient_user=user, recipient_team=team)
            request = Request(question=question, conversation=key, user=Actor(id=user))
            self._runner.submit(self._engine.ask(request), self._surfaces.at(target))


async def _tell(respond: AsyncRespond, text: str) -> None:
    """A reply only the person who typed the command sees (through the command's response_url)."""
    try:
        await respond(text=sentence(text), response_type="ephemeral")
    except Exception:
        logger.exception("could not reply to a /ask")
