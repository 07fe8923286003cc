"""Slack answers for one person: a placeholder, then the whole answer with its sources in one response_url post; the asker's DM when that cannot be."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from slack_sdk.webhook.async_client import AsyncWebhookClient

from adapters import wording
from adapters.answer_play import end_run, show_approval
from adapters.answers import ApprovalMessages
from core.citations import Citation, cite
from core.events import AnswerDelta, ApprovalRequired, Done, Event, Failed, SourceItem, Sources

from .render import SECTION_TEXT_MAX_CHARS, fit, markdown_text, safe_markdown, sentence, sources_messages
from .surface import ReplyTarget, SlackSurfaces

logger = logging.getLogger(__name__)

# Slack's answers when the bot may not post in or read a conversation (not invited; a private channel or a DM it is
# not in).
NOT_A_MEMBER_ERRORS = frozenset({"not_in_channel", "channel_not_found", "is_archived"})
# A private answer's conversation is its own (no one else's question shares its history): its thread names it.
PRIVATE_THREAD_PREFIX = "private:"
# Slack: a response_url takes 5 posts within 30 minutes of the interaction (Slack time).
RESPONSE_URL_MAX_POSTS = 5
RESPONSE_URL_LIFETIME_S = 30 * 60.0
RESPONSE_URL_TIMEOUT_S = 10.0
# A markdown block holds 12,000 characters: an answer's whole text, where a message's `text` holds 4,000.
ANSWER_BLOCK_MAX_CHARS = 12_000
# The notification's text beside the blocks.
FALLBACK_TEXT_MAX_CHARS = 3_000
# How long a note to the asker may take when the process stops under a private answer.
STOPPING_NOTE_WAIT_S = 3.0


@dataclass(frozen=True, kw_only=True)
class PrivatePlace:
    """Who a private answer is for, where they asked, and the response_url of their command or shortcut.

    `replaces`: the answer replaces the placeholder (a command's own reply); a shortcut's "original" is the message it
    was used on, never to be replaced, so its answer is a reply of its own."""

    team_id: str
    channel: str
    user: str
    response_url: str
    replaces: bool = True
    # Whether the asker's clicks in their DM are taken (DIRECT_MESSAGES, SLACK_TEAM_IDS): where not, an approval
    # is withdrawn with a sentence rather than posted where nobody may decide it.
    decides_in_dm: bool = True


@dataclass(frozen=True, kw_only=True)
class PrivateReply:
    """What the asker is shown: the answer's Markdown (or a sentence), and the sources it cites."""

    text: str
    citations: tuple[Citation, ...] = ()


class ResponseUrl:
    """One interaction's response_url, its posts counted as Slack counts them: past 5, or 30 minutes, it takes none."""

    def __init__(self, url: str, *, clock: Any, session: Any = None) -> None:
        self._url = url
        self._clock = clock  # Slack time (budgets.ScaledClock)
        self._session = session  # the adapter's aiohttp session: no connection of its own per post
        self._issued = clock.now()
        self.posts = 0

    def usable(self) -> bool:
        return bool(self._url) and self.posts < RESPONSE_URL_MAX_POSTS and (
            self._clock.now() - self._issued < RESPONSE_URL_LIFETIME_S)

    async def send(self, message: dict[str, Any]) -> bool:
        """True once Slack took the post; False when the URL is spent or Slack refused it (never raises)."""
        if not self.usable():
            return False
        self.posts += 1
        try:
            client = AsyncWebhookClient(self._url, timeout=int(RESPONSE_URL_TIMEOUT_S), session=self._session)
            response = await client.send_dict(message)
        except Exception as exc:
            logger.warning("a response_url post failed: %r", exc)
            return False
        if response.status_code != 200:
            logger.warning("a response_url post was refused: %s %s", response.status_code, str(response.body)[:100])
            return False
        return True

    async def tell(self, text: str) -> bool:
        """A shared sentence only the asker sees."""
        return await self.send({"text": sentence(text), "response_type": "ephemeral"})


def private_message(reply: PrivateReply, *, replace: bool) -> dict[str, Any]:
    """One ephemeral response_url post: the answer as a markdown block, its sources as mrkdwn sections under it."""
    shown = fit(safe_markdown(reply.text), ANSWER_BLOCK_MAX_CHARS)
    blocks: list[dict[str, Any]] = [{"type": "markdown", "text": shown}]
    blocks += [{"type": "section", "text": {"type": "mrkdwn", "text": part}} for part in _sections(reply.citations)]
    message: dict[str, Any] = {"text": fit(shown, FALLBACK_TEXT_MAX_CHARS), "blocks": blocks, "response_type": "ephemeral"}
    if replace:
        message["replace_original"] = True
    return message


def _sections(citations: tuple[Citation, ...]) -> list[str]:
    """The sources reply's lines, grouped into texts a section block holds."""
    texts: list[str] = []
    for text in sources_messages(citations):
        current = ""
        for line in text.split("\n"):
            line = fit(line, SECTION_TEXT_MAX_CHARS)
            if current and len(current) + 1 + len(line) > SECTION_TEXT_MAX_CHARS:
                texts.append(current)
                current = line
            else:
                current = f"{current}\n{line}" if current else line
        if current:
            texts.append(current)
    return texts


class PrivateAnswers:
    """Plays a run for one person without streaming: a response_url allows 5 posts, so the placeholder is one and the
    whole answer another. An approval goes to the asker's DM (buttons in an ephemeral vanish on reload while the run
    would wait on them), where the approved run continues. Whatever happens the asker is told: the answer, a
    sentence, or — the URL spent, expired or refused — the answer in their DM with a sentence saying why."""

    def __init__(self, *, surfaces: SlackSurfaces, approvals: ApprovalMessages) -> None:
        self._surfaces = surfaces
        self._approvals = approvals

    def url(self, response_url: str) -> ResponseUrl:
        return ResponseUrl(response_url, clock=self._surfaces.clock, session=self._surfaces.clients.session)

    async def play(
        self, events: AsyncIterator[Event], place: PrivatePlace, url: ResponseUrl, *, placeholder: str | None,
        note: str = "",
    ) -> None:
        """The run's answer to `place.user` only; `note`: a sentence shown above the answer."""
        placed = await url.tell(placeholder) if placeholder else False
        try:
            reply = await self._collect(events, place)
        except asyncio.CancelledError:
            # The process is stopping under the answer: the placeholder says so rather than "thinking" for ever.
            stopping = PrivateReply(text=wording.interrupted())
            try:
                await asyncio.shield(asyncio.wait_for(
                    self.deliver(stopping, place, url, replace=placed and place.replaces), STOPPING_NOTE_WAIT_S))
            except Exception:
                logger.warning("could not tell %s that their private answer was interrupted", place.user)
            raise
        except Exception:
            logger.exception("a private answer in %s failed", place.channel)
            reply = PrivateReply(text=wording.failed(wording.private_answer_failed()))
        if note:
            reply = PrivateReply(text=f"{note}\n\n{reply.text}", citations=reply.citations)
        await self.deliver(reply, place, url, replace=placed and place.replaces)

    async def _collect(self, events: AsyncIterator[Event], place: PrivatePlace) -> PrivateReply:
        written: list[str] = []
        sources: tuple[SourceItem, ...] = ()
        try:
            async for event in events:
                match event:
                    case AnswerDelta():
                        written.append(event.text)
                    case Sources():
                        sources = event.items
                    case ApprovalRequired():
                        return await self._approval_in_dm(event, place)
                    case Done():
                        cited = cite(event.answer or "".join(written), sources)
                        if not cited.text.strip():  # a markdown block needs text: an empty answer is a failure
                            return PrivateReply(text=wording.failed(wording.private_answer_failed()))
                        return PrivateReply(text=cited.text, citations=cited.citations)
                    case Failed():
                        said = "".join(written).strip()
                        return PrivateReply(text=f"{said}\n\n{wording.failed(event.message)}" if said
                                            else wording.failed(event.message))
            said = "".join(written).strip()
            return PrivateReply(text=said or wording.failed(wording.private_answer_failed()))
        finally:
            await end_run(events)

    async def _approval_in_dm(self, event: ApprovalRequired, place: PrivatePlace) -> PrivateReply:
        if not place.decides_in_dm:
            await self._approvals.withdraw(event.continuation_id)
            return PrivateReply(text=wording.private_approval_dms_refused())
        try:
            dm = await self.open_dm(place.team_id, place.user)
        except Exception:
            logger.exception("could not open %s's DM for approval %s; withdrawing it", place.user, event.continuation_id)
            await self._approvals.withdraw(event.continuation_id)
            return PrivateReply(text=wording.approval_not_shown())
        await show_approval(event, self._surfaces.at(ReplyTarget(team_id=place.team_id, channel=dm, thread_ts=None)),
                            self._approvals)
        return PrivateReply(text=wording.private_approval_in_dm())

    async def deliver(self, reply: PrivateReply, place: PrivatePlace, url: ResponseUrl, *, replace: bool) -> None:
        """Through the response_url; where it takes no more, in the asker's DM with a sentence: never lost."""
        if await url.send(private_message(reply, replace=replace)):
            return
        try:
            await self.in_dm(place, PrivateReply(text=f"{wording.private_answer_moved_to_dm()}\n\n{reply.text}",
                                                 citations=reply.citations))
        except Exception:
            logger.exception("could not deliver a private answer to %s by its response_url or DM", place.user)

    async def in_dm(self, place: PrivatePlace, reply: PrivateReply) -> None:
        dm = await self.open_dm(place.team_id, place.user)
        target = ReplyTarget(team_id=place.team_id, channel=dm, thread_ts=None)
        posted = await self._surfaces.post_paced(target, markdown_text=markdown_text(reply.text))
        if reply.citations:
            await self._surfaces.at(target).show_sources(reply.citations, [str(posted["ts"])])

    async def open_dm(self, team_id: str, user: str) -> str:
        """The bot's DM with `user` (conversations.open, needs im:write)."""
        web = self._surfaces.web
        opened = await web.call(team_id, "conversations.open", budget=web.budgets.other(team_id, "conversations.open"), users=user)
        return str((opened.get("channel") or {}).get("id") or "")
