"""Slack events → engine requests: mentions, DMs, thread follow-ups and (respond_to=all) a channel's top-level
messages, each answered once; thread context and files read the same way as on every platform."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import Any, Literal


from adapters import wording
from adapters.answers import AnswerRunner
from adapters.gate import Admission, AnswerAllCap, EventNotRecorded, Gate, over_cap_sentence
from adapters.policy import THREAD_CONTEXT_MAX_MESSAGES
from core import metrics
from core.config import DirectMessagePolicy, Settings
from core.engine import Engine
from core.ports import KnownConversations
from core.requests import Actor, ConversationKey, PriorMessage, Request

from .early_signs import EarlySigns, reply_target
from .files import SlackFiles
from .reader import BotIdentity, SlackReader
from .settings import SlackSettings
from .surface import PLATFORM, ReplyTarget, SlackSurfaces
from .team_tokens import team_of
from .working import WorkingSign

logger = logging.getLogger(__name__)

OVER_CAP_REACTION = "raised_hand"  # ✋, adapters/gate.py's OVER_CAP_REACTION by its Slack name
_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")
# Message subtypes that are a person writing: a file share, and a thread reply also sent to the channel.
PERSON_SUBTYPES = frozenset({"file_share", "thread_broadcast"})
# Slack redelivers an event it got no 2xx (or Socket Mode ack) for three times, numbering them 1-3.
SLACK_LAST_RETRY_NUM = 3

Access = Literal["allowed", "refused", "direct_messages_off"]


class SlackAccess:
    """Who may ask and decide, beyond the envelope's workspace (checked by the gate middleware).

    In a Slack Connect channel the envelope names the host workspace while the person writing
    belongs to their own, so their team must be on `SLACK_TEAM_IDS` too. Direct messages follow
    `DIRECT_MESSAGES`: `members` (people of an allowed workspace; everyone with no allowlist),
    `open` (anyone) or `closed`.
    """

    def __init__(
        self, *, allowed_teams: tuple[str, ...], direct_messages: DirectMessagePolicy,
        org_of: Callable[[str], str | None] = lambda team: None,
    ) -> None:
        self._allowed = frozenset(allowed_teams)
        self._direct_messages = direct_messages
        self._org_of = org_of  # a team's Grid org: SLACK_TEAM_IDS may name the org (E…) instead of its workspaces

    def person(self, user: str, teams: tuple[str, ...], *, direct: bool, shared: bool = False, quiet: bool = False) -> Access:
        """`teams`: every team the payload says `user` belongs to; `shared`: the envelope says the
        channel is shared with another organisation, so a person of no stated team is not let in;
        `quiet`: a look ahead (the record's early sign), the refusal logged by the listener only."""
        if direct and self._direct_messages == "closed":
            return "direct_messages_off"
        if (direct and self._direct_messages == "open") or not self._allowed:
            return "allowed"
        outside = [team for team in teams if team not in self._allowed and self._org_of(team) not in self._allowed]
        if outside or (shared and not teams):
            if not quiet:
                logger.info("refusing Slack user %s of %s: not in SLACK_TEAM_IDS", user, ", ".join(outside) or "an unstated team")
            return "refused"
        return "allowed"


def asker_teams(event: dict[str, Any]) -> tuple[str, ...]:
    """The teams an event says its author belongs to (`user_team`, `source_team`, the profile's, `team`)."""
    profile = event.get("user_profile")
    found = (
        event.get("user_team"), event.get("source_team"),
        profile.get("team") if isinstance(profile, dict) else None, event.get("team"),
    )
    return tuple(dict.fromkeys(team for team in found if isinstance(team, str) and team))


class SlackInbound:
    """Bolt listeners for messages; they run after Bolt has acked the event."""

    def __init__(
        self, *, settings: Settings, engine: Engine, gate: Gate, runner: AnswerRunner, surfaces: SlackSurfaces,
        conversations: KnownConversations, reader: SlackReader, identity: Callable[[str], BotIdentity],
    ) -> None:
        self._slack = settings.platform_settings(SlackSettings)
        self._reader = reader
        self._engine = engine
        self._gate = gate
        self._runner = runner
        self._surfaces = surfaces
        self._conversations = conversations
        self._files = SlackFiles(api_url=self._slack.api_url, token=surfaces.clients.token)
        self.answer_all_cap = AnswerAllCap(per_minute=settings.respond_all_per_minute)
        self._identity = identity  # a team's bot as auth.test told it (what Bolt's context says too)
        self.early_signs = EarlySigns()
        self.access = SlackAccess(allowed_teams=self._slack.team_ids, direct_messages=settings.direct_messages,
                                  org_of=surfaces.web.clients.known_org)

    async def open(self) -> None:
        await self._files.open()

    async def close(self) -> None:
        await self.early_signs.close()
        await self._files.close()

    async def record(self, body: dict[str, Any], *, retry_num: int) -> bool:
        """Before the ack, a question's durable record (its dedup row). False: do not ack, Slack redelivers it;
        on Slack's last retry it is acked anyway and its listener tells the asker (never silence).

        A first delivery that will be answered as a question gets its sign at once, beside the record: the listener
        takes it over. A retry (maybe of an answered event) and a thread follow-up (is the bot in the thread? the
        database says) get theirs from the listener, after the record."""
        event_id = str(body.get("event_id") or "")
        target = self._early_target(body) if retry_num == 0 else None
        early = target is not None and self.early_signs.recording(event_id, partial(self._surfaces.sign, target))
        admission: Admission = "unavailable"
        try:
            admission = await self._gate.admit(event_id)
        finally:
            ending = self.early_signs.recorded(event_id, admission) if early else None
            if ending is not None:
                # Down before Slack hears the refusal (or the duplicate's ack): a redelivery's own sign cannot race it.
                await asyncio.shield(ending)
        if admission != "unavailable":
            return True
        if retry_num >= SLACK_LAST_RETRY_NUM:
            self._gate.hand_on(event_id, "unavailable")
            return True
        return False

    async def on_app_mention(self, body: dict[str, Any], event: dict[str, Any], bot: BotIdentity) -> None:
        with self._gate.track(), self.early_signs.settled(body):
            if _not_from_a_person(event) or not self._may_ask(body, event):
                return
            target = reply_target(body, event)
            admitted, sign = await self._first_time(body, target)
            if not admitted:
                return
            ts, thread_ts = str(event["ts"]), str(target.thread_ts)
            key = ConversationKey(platform=PLATFORM, workspace=target.team_id, channel=target.channel, thread=thread_ts)

            def earlier_messages() -> Awaitable[tuple[PriorMessage, ...]]:
                return self._thread_context(target.team_id, target.channel, thread_ts, before_ts=ts, bot=bot)

            await self._answer_with_sign(event, key=key, target=target, bot_user_id=bot.user_id, sign=sign,
                                         context=earlier_messages if thread_ts != ts else None)

    async def on_message(self, body: dict[str, Any], event: dict[str, Any], bot: BotIdentity) -> None:
        with self._gate.track(), self.early_signs.settled(body):
            if _not_from_a_person(event) or bot.wrote(event):
                return
            if event.get("channel_type") == "im":
                await self._on_direct_message(body, event, bot)
                return
            # A channel message without a mention (a mention arrives as app_mention too and is answered there):
            # a top-level one where the channel answers everything, else only follow-ups in threads the bot
            # already answers, where respond_to (SLACK_THREAD_FOLLOWUPS unless a channel says otherwise) lets them in.
            if bot.user_id and f"<@{bot.user_id}" in str(event.get("text", "")):
                return
            thread_ts = event.get("thread_ts")
            if not thread_ts or thread_ts == event.get("ts"):
                await self._on_top_level(body, event, bot)
                return
            target = reply_target(body, event)
            try:
                if not await self._gate.first_time(str(body.get("event_id") or "")):
                    return
            except EventNotRecorded:
                # Whether the bot is in this thread is itself in the database: a sentence could land in a
                # thread of strangers, so a follow-up that cannot be recorded is only logged.
                logger.warning("a thread follow-up in %s could not be recorded (database down); not answered", target.channel)
                return
            key = ConversationKey(platform=PLATFORM, workspace=target.team_id, channel=target.channel, thread=str(thread_ts))
            if not await self._conversations.exists(key) or not self._may_ask(body, event):
                return
            if not (await self._engine.channel(key)).answers_followups:
                return
            await self._answer_with_sign(event, key=key, bot_user_id=bot.user_id, target=target)

    async def _on_top_level(self, body: dict[str, Any], event: dict[str, Any], bot: BotIdentity) -> None:
        """A person's new top-level message: answered in its thread where the channel is respond_to=all, within
        RESPOND_ALL_PER_MINUTE; past it, told once to mention the bot, then marked."""
        ts = str(event["ts"])
        target = replace(reply_target(body, event), thread_ts=ts)
        key = ConversationKey(platform=PLATFORM, workspace=target.team_id, channel=target.channel, thread=ts)
        try:
            everything = (await self._engine.channel(key)).answers_everything
        except Exception:
            # Whether the channel answers everything is unknown: a sentence could land under anyone's chatter.
            logger.warning("could not read the settings of %s; a top-level message there is not answered",
                           target.channel, exc_info=True)
            return
        if not everything or not self._may_ask(body, event):
            return
        try:
            # Recorded only here: most channel messages are in no answer-everything channel and need no record.
            if not await self._gate.first_time(str(body.get("event_id") or "")):
                return
        except EventNotRecorded:
            # Acked already (only questions are recorded before the ack), so nothing redelivers it: the one sentence.
            logger.warning("a top-level message in %s could not be recorded (database down); telling the asker",
                           target.channel)
            await self._surfaces.at(target).show_notice(wording.database_unreachable())
            return
        turn = self.answer_all_cap.take(f"{target.team_id}:{target.channel}")
        if turn == "answer":
            await self._answer_with_sign(event, key=key, target=target, bot_user_id=bot.user_id)
        elif turn == "tell":
            await self._surfaces.at(target).show_notice(over_cap_sentence(self.answer_all_cap.per_minute))
        else:
            try:
                await self._surfaces.web.now(target.team_id, "reactions.add", channel=target.channel, timestamp=ts,
                                             name=OVER_CAP_REACTION)
            except Exception as exc:
                logger.info("could not mark a message over the cap in %s: %s", target.channel, exc)

    async def _on_direct_message(self, body: dict[str, Any], event: dict[str, Any], bot: BotIdentity) -> None:
        # Top-level DMs are one rolling conversation; a thread in a DM is its own.
        target = reply_target(body, event)
        admitted, sign = await self._first_time(body, target)
        if not admitted:
            return
        key = ConversationKey(platform=PLATFORM, workspace=target.team_id, channel=target.channel,
                              thread=target.thread_ts or "", direct=True)
        access = self._dm_access(body, event)
        if access != "allowed":
            if sign is not None:  # never: a DM refused gets no early sign (_early_target asks the same rule)
                await asyncio.shield(sign.end())
            # The same DM rule, and the same sentences, as on every platform.
            refusal = wording.direct_messages_off() if access == "direct_messages_off" else wording.direct_messages_members_only()
            await self._surfaces.at(target).show_notice(refusal)
            return
        await self._answer_with_sign(event, key=key, target=target, bot_user_id=bot.user_id, sign=sign)

    def sign_ahead(self, body: dict[str, Any]) -> None:
        """A signed first delivery, before Bolt's dispatch: a question's sign goes up at once (its record keeps it)."""
        team = team_of(body)
        self._surfaces.web.clients.note(team)  # its sign's call goes to the org's install (the middleware keeps it)
        if not self._gate.accepting or not is_question_event(body) or not self._gate.allows(
                team.team_id, org=team.enterprise_id, quiet=True):
            return
        target = self._early_target(body)
        if target is not None:
            self.early_signs.ahead(str(body.get("event_id") or ""), partial(self._surfaces.sign, target))

    def _early_target(self, body: dict[str, Any]) -> ReplyTarget | None:
        """Where the sign goes of an event its listener will answer as a question whatever the database says: a
        mention from someone who may ask, a DM its writer may send. None for the rest (thread follow-ups)."""
        event = body["event"]
        if _not_from_a_person(event) or self._identity(reply_target(body, event).team_id).wrote(event):
            return None
        if event.get("type") == "app_mention":
            return reply_target(body, event) if self._may_ask(body, event, quiet=True) else None
        # The assistant pane's listener answers no message with a subtype in its threads (adapters/slack/assistant.py).
        in_pane = self._slack.assistant and event.get("thread_ts") and event.get("subtype")
        if event.get("channel_type") == "im" and not in_pane and self._dm_access(body, event, quiet=True) == "allowed":
            return reply_target(body, event)
        return None

    async def _first_time(self, body: dict[str, Any], target: ReplyTarget) -> tuple[bool, WorkingSign | None]:
        """The gate's answer, and the event's early sign when this listener answers it (taken in the gate's step);
        a question that cannot be recorded (Slack's last retry) gets the one sentence."""
        event_id = str(body.get("event_id") or "")
        try:
            admitted = await self._gate.first_time(event_id)
        except EventNotRecorded:
            logger.warning("Slack event %s could not be recorded (database down); telling the asker", event_id)
            await self._surfaces.at(target).show_notice(wording.database_unreachable())
            return False, None
        return admitted, self.early_signs.take(event_id) if admitted and event_id else None

    def _may_ask(self, body: dict[str, Any], event: dict[str, Any], *, quiet: bool = False) -> bool:
        """In a channel: the asker's own workspace must be allowed, not only the channel's."""
        return self.access.person(str(event.get("user")), asker_teams(event), direct=False, shared=_shared(body),
                                  quiet=quiet) == "allowed"

    def _dm_access(self, body: dict[str, Any], event: dict[str, Any], *, quiet: bool = False) -> Access:
        return self.access.person(str(event.get("user")), asker_teams(event), direct=True, shared=_shared(body), quiet=quiet)

    async def _answer_with_sign(
        self, event: dict[str, Any], *, key: ConversationKey, target: ReplyTarget, bot_user_id: str,
        context: Callable[[], Awaitable[tuple[PriorMessage, ...]]] | None = None, sign: WorkingSign | None = None,
    ) -> None:
        """The answer, under its first sign (the thread's status, or 👀 on the question) until it ends: `sign`, the one
        its record put up, else one from now.

        The sign goes up before the thread's earlier messages (`context`) are read: reading may wait on its
        budget, the asker should not."""
        if sign is None:
            sign = self._surfaces.sign(target)
        sign.show()
        submitted = False
        try:
            prior = await context() if context is not None else ()
            submitted = await self._answer(event, key=key, target=target, bot_user_id=bot_user_id, context=prior,
                                           sign=sign)
        finally:
            if not submitted:
                await asyncio.shield(sign.end())

    async def _answer(
        self, event: dict[str, Any], *, key: ConversationKey, target: ReplyTarget, bot_user_id: str,
        context: tuple[PriorMessage, ...] = (), sign: WorkingSign | None = None,
    ) -> bool:
        """True once the answer is submitted (its sign then ends with it); False when there is nothing to answer."""
        text = str(event.get("text", ""))
        question = _MENTION.sub(lambda m: "" if m.group(1) == bot_user_id else m.group(0), text).strip()
        attachments = await self._files.read(list(event.get("files") or []), team_id=target.team_id)
        # The asker is the recipient of a native stream in a channel (Slack needs them and their own team).
        asker = str(event.get("user", ""))
        surface = self._surfaces.at(replace(target, recipient_user=asker or None,
                                            recipient_team=(asker_teams(event) or (target.team_id,))[0] or None),
                                    sign=sign)
        if not question and not attachments:
            await surface.show_notice(wording.empty_question())
            return False
        request = Request(
            question=question, conversation=key, user=Actor(id=str(event.get("user", ""))),
            attachments=attachments, thread_context=context,
        )
        # Played in a task of its own: a question waiting for its turn does not hold this handler's stack.
        self._runner.submit(self._engine.ask(request), surface, then=sign.end if sign is not None else None)
        return True

    async def _thread_context(
        self, team_id: str, channel: str, thread_ts: str, *, before_ts: str, bot: BotIdentity
    ) -> tuple[PriorMessage, ...]:
        """The thread's messages before the mention; the engine trims them to its history budget."""
        try:
            return tuple(await self._reader.thread(
                team_id, channel, thread_ts, limit=THREAD_CONTEXT_MAX_MESSAGES, bot=bot, before_ts=before_ts
            ))
        except Exception:
            logger.exception("could not read thread %s in %s; answering without it", thread_ts, channel)
            return ()


def is_question_event(body: dict[str, Any]) -> bool:
    """An event a listener may answer as a question (recorded before the ack): a person's mention, DM or thread reply."""
    event = body.get("event")
    if body.get("type") != "event_callback" or not isinstance(event, dict) or not body.get("event_id"):
        return False
    if event.get("type") not in ("app_mention", "message"):
        return False
    subtype = event.get("subtype")
    if event.get("bot_id") or (subtype is not None and subtype not in PERSON_SUBTYPES) or _malformed(event) is not None:
        return False
    if event["type"] == "app_mention" or event.get("channel_type") == "im":
        return True
    return bool(event.get("thread_ts")) and event.get("thread_ts") != event.get("ts")


def _not_from_a_person(event: dict[str, Any]) -> bool:
    """Bots, edits, joins and every other subtype are not questions (file shares and replies also sent to
    the channel are); nor is an event whose fields are not what Slack sends (logged, counted)."""
    subtype = event.get("subtype")
    if bool(event.get("bot_id")) or (subtype is not None and subtype not in PERSON_SUBTYPES) or not event.get("user"):
        return True
    problem = _malformed(event)
    if problem is not None:
        logger.warning("dropped a malformed Slack event: %s", problem)
        metrics.record_malformed_event(platform=PLATFORM)
        return True
    return False


# The fields a question is read from, and the type Slack gives each; optional ones may be absent.
REQUIRED_FIELDS = {"user": str, "channel": str, "ts": str}
OPTIONAL_FIELDS = {"text": str, "thread_ts": str, "channel_type": str, "files": list, "team": str}


def _malformed(event: dict[str, Any]) -> str | None:
    """What is wrong with a message event's fields, or None when they have the types Slack sends."""
    for name, kind in REQUIRED_FIELDS.items():
        if not isinstance(event.get(name), kind) or not event[name]:
            return f"{name} is {type(event.get(name)).__name__}, not a non-empty {kind.__name__}"
    for name, kind in OPTIONAL_FIELDS.items():
        if event.get(name) is not None and not isinstance(event[name], kind):
            return f"{name} is {type(event[name]).__name__}, not {kind.__name__}"
    return None


def _shared(body: dict[str, Any]) -> bool:
    return body.get("is_ext_shared_channel") is True
