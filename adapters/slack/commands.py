"""Slack's `/ask`: acked at once, the question posted in the channel and answered in its thread (a clear reply where the
bot is not a member); `/ask private: …` answered only to the asker, `/ask dm: …` in the asker's DM."""

from __future__ import annotations

import logging
import re
from typing import Any, Literal

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.errors import SlackApiError

from adapters import wording
from adapters.answers import AnswerRunner
from adapters.gate import EventNotRecorded, Gate
from core.engine import Engine
from core.requests import Actor, ConversationKey, Request

from . import wording as slack_wording
from .inbound import SlackAccess
from .private_answers import NOT_A_MEMBER_ERRORS, PRIVATE_THREAD_PREFIX, PrivateAnswers, PrivatePlace
from .reader import SlackReader
from .shortcuts import SlackShortcuts, registrations
from .render import MAX_MESSAGE_TEXT_CHARS, fit, markdown_text, safe_markdown, sentence
from .surface import PLATFORM, ReplyTarget, SlackSurfaces

logger = logging.getLogger(__name__)

COMMAND = "/ask"
# Where an answer goes: `private:` (also `--private`) only to the asker, `dm:` (`--dm`) in the asker's DM.
Audience = Literal["channel", "private", "dm"]
_AUDIENCE = re.compile(r"^\s*(?:(private|dm)\s*:|--(private|dm)\b)\s*", re.IGNORECASE)


def audience_of(text: str) -> tuple[Audience, str]:
    """Where `/ask <text>` wants its answer, and the question without the prefix that said so."""
    found = _AUDIENCE.match(text)
    if found is None:
        return "channel", text.strip()
    word = (found.group(1) or found.group(2)).lower()
    return ("private" if word == "private" else "dm"), text[found.end():].strip()


class SlackCommands:
    """Bolt's listener for `/ask`, answered like a mention: the question is posted where it was asked, so
    everyone sees what the answer in its thread answers (as Discord shows its `/ask`). It registers the message
    shortcuts that ask too (adapters/slack/shortcuts.py), which share its private answers."""

    def __init__(
        self, *, engine: Engine, runner: AnswerRunner, surfaces: SlackSurfaces, gate: Gate, access: SlackAccess,
        reader: SlackReader,
    ) -> None:
        self._engine = engine
        self._runner = runner
        self._surfaces = surfaces
        self._gate = gate
        self._access = access
        self._private = PrivateAnswers(surfaces=surfaces, approvals=engine.approvals)
        self.shortcuts = SlackShortcuts(engine=engine, runner=runner, surfaces=surfaces, gate=gate, access=access,
                                        reader=reader, private=self._private)

    def register(self, app: AsyncApp) -> None:
        """`/ask` and the message shortcuts, each to its listener."""
        app.command(COMMAND)(self.on_ask)
        for callback_id, handler in registrations(self.shortcuts).items():
            app.shortcut(callback_id)(handler)

    async def on_ask(self, ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond) -> None:
        # Acked first: Slack shows an error when a command is not acknowledged within 3 s.
        await ack()
        with self._gate.track():
            user, channel = str(body.get("user_id") or ""), str(body.get("channel_id") or "")
            team = str(body.get("team_id") or "")
            audience, question = audience_of(str(body.get("text") or ""))
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
            if audience == "private":
                await self._answer_privately(body, team=team, channel=channel, user=user, question=question, direct=direct)
                return
            if audience == "dm":
                await self._answer_in_dm(respond, team=team, channel=channel, user=user, question=question, direct=direct)
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

    async def _answer_privately(
        self, body: dict[str, Any], *, team: str, channel: str, user: str, question: str, direct: bool,
    ) -> None:
        """A placeholder, then the whole answer in one replace_original post only the asker sees. Retrieval is the
        channel's (its key names the channel); no reminder (it would post in the channel later) and no reading back."""
        place = PrivatePlace(team_id=team, channel=channel, user=user, response_url=str(body.get("response_url") or ""),
                             decides_in_dm=self._access.person(user, (team,) if team else (), direct=True) == "allowed")
        key = ConversationKey(platform=PLATFORM, workspace=team, channel=channel, direct=direct,
                              thread=f"{PRIVATE_THREAD_PREFIX}{body.get('trigger_id') or ''}")
        request = Request(question=question, conversation=key, user=Actor(id=user), reaches=frozenset())
        await self._private.play(self._engine.ask(request), place, self._private.url(place.response_url),
                                 placeholder=wording.private_thinking())

    async def _answer_in_dm(
        self, respond: AsyncRespond, *, team: str, channel: str, user: str, question: str, direct: bool,
    ) -> None:
        """The question posted in the asker's DM and answered in its thread as any answer is (streamed, Stop, 👍/👎);
        retrieval is still the channel's where it was asked (a DM's grants would widen it). Not where the asker's DM
        takes no questions (DIRECT_MESSAGES): its follow-ups and clicks would be refused there."""
        dms = self._access.person(user, (team,) if team else (), direct=True)
        if dms != "allowed":
            await _tell(respond, wording.direct_messages_off() if dms == "direct_messages_off"
                        else wording.direct_messages_members_only())
            return
        try:
            dm = await self._private.open_dm(team, user)
            posted = await self._surfaces.post_paced(ReplyTarget(team_id=team, channel=dm, thread_ts=None),
                                                     markdown_text=markdown_text(wording.asked_in_dm(question)))
        except Exception:
            logger.exception("could not open %s's DM for a /ask dm:", user)
            await _tell(respond, wording.private_answer_failed())
            return
        thread_ts = str(posted["ts"])
        key = ConversationKey(platform=PLATFORM, workspace=team, channel=channel, thread=thread_ts, direct=direct)
        target = ReplyTarget(team_id=team, channel=dm, thread_ts=thread_ts, recipient_user=user, recipient_team=team)
        # The key names the channel, the messages are in the DM: no reminder (it would go to the channel) nor read back.
        request = Request(question=question, conversation=key, user=Actor(id=user), reaches=frozenset())
        self._runner.submit(self._engine.ask(request), self._surfaces.at(target))
        if not direct:
            await _tell(respond, wording.answering_in_dm())


async def _tell(respond: AsyncRespond, text: str) -> None:
    """A reply only the person who typed the command sees (through the command's response_url)."""
    try:
        await respond(text=sentence(text), response_type="ephemeral")
    except Exception:
        logger.exception("could not reply to a /ask")
