"""Slack's live events about channels as ChannelChanges for the engine (ports.learning.take), taken off the answer path.

`message` (plain, thread_broadcast, file_share, a thread reply, another bot's), `message_changed` (the edited
`message`), `message_deleted` (`deleted_ts`); channel_rename / group_rename; channel_archive, group_archive,
channel_deleted, group_deleted and the bot's own removal (member_left_channel of its user, channel_left,
group_left) as "left"; anyone else's member_joined_channel / member_left_channel as "member" (the readers' cache
forgets them there and then); channel_shared, channel_unshared and the channel_convert_to_private / _public
messages forget the channel's place. DMs and group DMs are never passed on.

Changes go through one ordered feed (adapters/learning_feed.py, as Discord's): the listener that answers questions
never waits for it, a delete never overtakes the message it deletes, and a failure is logged, never lost silently."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from adapters.learning_feed import LearningFeed
from core.learning.model import ChannelChange, ChannelPlace
from core.learning.ports import ChannelLearning

from .channel_facts import SlackChannelFacts
from .channel_history import SlackChannelHistory
from .reader import BotIdentity
from .surface import PLATFORM
from .team_tokens import team_of

logger = logging.getLogger(__name__)

LEFT_EVENTS = frozenset({"channel_archive", "group_archive", "channel_deleted", "group_deleted", "channel_left", "group_left"})
RENAME_EVENTS = frozenset({"channel_rename", "group_rename"})
MEMBER_EVENTS = frozenset({"member_joined_channel", "member_left_channel"})
SHARE_EVENTS = frozenset({"channel_shared", "channel_unshared"})
# The channel events Bolt routes here (message events come through the message listener).
CHANNEL_EVENTS = LEFT_EVENTS | RENAME_EVENTS | MEMBER_EVENTS | SHARE_EVENTS
CONVERTED_SUBTYPES = frozenset({"channel_convert_to_private", "channel_convert_to_public"})
DIRECT_TYPES = frozenset({"im", "mpim"})


class SlackLearningEvents:
    """Turns Slack's events into ChannelChanges and hands them to `learning` (None: nothing is learned here)."""

    def __init__(self, *, history: SlackChannelHistory, facts: SlackChannelFacts, learning: ChannelLearning | None) -> None:
        self._history = history
        self._facts = facts
        self._learning = learning
        self.feed = LearningFeed(lambda: learning, platform=PLATFORM)

    def on_message(self, body: dict[str, Any], event: dict[str, Any], bot: BotIdentity) -> None:
        """A `message` event of any subtype in a channel: its change goes to the engine in the background."""
        team, channel = _team(body), str(event.get("channel") or "")
        if not team or not channel or event.get("channel_type") in DIRECT_TYPES or channel.startswith("D"):
            return
        subtype = event.get("subtype")
        if subtype in CONVERTED_SUBTYPES:
            self._facts.forget(team, channel=channel)  # public now, or private: who may read it changed
            return
        place = ChannelPlace(platform=PLATFORM, workspace=team, channel=channel)
        if self._learning is None or not self._learning.chosen(place):
            return
        if subtype == "message_deleted":
            self.feed.put(ChannelChange(kind="deleted", place=place, message_id=str(event.get("deleted_ts") or "")))
        elif subtype == "message_changed":
            edited = event.get("message")
            if isinstance(edited, dict) and edited.get("subtype") == "tombstone":
                # A deleted root that has replies stays as a tombstone ("This message was deleted."): its text goes.
                self.feed.put(ChannelChange(kind="deleted", place=place, message_id=str(edited.get("ts") or "")))
            elif isinstance(edited, dict):
                self.feed.put(self._message_change(place, dict(edited)))
        else:
            self.feed.put(self._message_change(place, event))

    def on_channel_event(self, body: dict[str, Any], event: dict[str, Any], bot: BotIdentity) -> None:
        """A rename, an archive or deletion, someone (or the bot) joining or leaving, a channel shared or unshared."""
        team, kind = _team(body), str(event.get("type") or "")
        raw = event.get("channel")
        channel = str((raw.get("id") if isinstance(raw, dict) else raw) or "")
        if not team or not channel:
            return
        place = ChannelPlace(platform=PLATFORM, workspace=team, channel=channel)
        user = str(event.get("user") or "")
        if kind in SHARE_EVENTS:
            self._facts.forget(team, channel=channel)
            return
        if kind in MEMBER_EVENTS and not (kind == "member_left_channel" and user and user == bot.user_id):
            # Their channels changed, and the channel's people (a guest may have joined): both read again.
            self._facts.forget(team, user=user, channel=channel)
            change = ChannelChange(kind="member", place=place, user=user)
        elif kind in RENAME_EVENTS:
            change = ChannelChange(kind="renamed", place=place, name=str((raw or {}).get("name") or ""))
        elif kind in LEFT_EVENTS or kind == "member_left_channel":
            self._facts.forget(team, channel=channel)
            change = ChannelChange(kind="left", place=place)
        else:
            return
        self.feed.put(change)

    async def close(self) -> None:
        """Changes still queued are dropped (the engine's catch-up reads them again)."""
        await self.feed.close()

    @property
    def pending(self) -> int:
        return self.feed.pending

    def _message_change(self, place: ChannelPlace, raw: dict[str, Any]) -> Any:
        """The change of a message, made in the feed's turn: its author's name may need a users.info call."""

        async def made() -> Sequence[ChannelChange]:
            message = await self._history.message(place.workspace, place.channel, raw)
            return () if message is None else (ChannelChange(kind="message", place=place, message=message),)

        return made


def _team(body: dict[str, Any]) -> str:
    return team_of(body).team_id or str(body.get("team_id") or "")
