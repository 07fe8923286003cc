"""The values learning from a channel passes between the platforms and the engine: messages, pages, places, changes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

# sources.kind of a learned channel's source (core/store/learned_channels.py).
CHANNEL_KIND = "channel"


class LearningRefused(Exception):
    """A channel cannot be learned from (yet): `sentence` says why and what to do, for the admin who asked."""

    def __init__(self, sentence: str) -> None:
        super().__init__(sentence)
        self.sentence = sentence


@dataclass(frozen=True, kw_only=True)
class ChannelPlace:
    """One channel of one team: `platform` and `workspace` as a ConversationKey names them (`slack`, `T1`)."""

    platform: str
    workspace: str
    channel: str

    @property
    def key(self) -> str:
        """Its name in rows and checks: `slack:T1:C1`."""
        return f"{self.platform}:{self.workspace}:{self.channel}"


@dataclass(frozen=True, kw_only=True)
class ChannelInfo:
    """What the platform says of a channel when learning from it starts (and on a rename)."""

    name: str  # without '#': `incidents`
    private: bool  # Slack: a private channel; Discord: @everyone cannot view it
    direct: bool = False  # a DM or group DM: never learned from


@dataclass(frozen=True, kw_only=True)
class ChannelMessage:
    """One message as read from history or a live event, in the platform's own ids.

    `thread` is the id of the thread's root for a reply, the message's own id for a root that has replies
    (or a Discord message that started a thread), and '' for a message outside any thread.
    """

    id: str  # Slack `ts`, a Discord snowflake
    thread: str
    author_id: str
    author_name: str  # a display name, as shown beside the message
    text: str
    at: datetime  # aware, UTC
    by_bot: bool = False  # a bot, an app, a webhook, or this app itself: never learned from
    # A question to this app (it mentions it): asked, not told, and never learned from — learnt, it would come back as
    # its own answer's source.
    to_bot: bool = False
    reply_count: int = 0
    latest_reply: str = ""  # a root's newest reply id, when the platform says (Slack `latest_reply`)
    files: tuple[str, ...] = ()  # attachments' names: named in the document, never fetched
    permalink: str = ""  # '' when the platform needs a call to make one (ChannelHistory.permalink)

    @property
    def never_learned(self) -> bool:
        return self.by_bot or self.to_bot


@dataclass(frozen=True, kw_only=True)
class HistoryPage:
    """One page of a channel's or a thread's messages; `next_cursor` '' on the last page."""

    messages: tuple[ChannelMessage, ...]
    next_cursor: str = ""


@dataclass(frozen=True, kw_only=True)
class Place:
    """Who can see a channel, as the visibility rule needs it (core/learning/visibility.py)."""

    public: bool  # every full member of the team can read it (Slack public channel; Discord @everyone views)
    has_guests: bool = False  # Slack: a member is a guest (is_restricted / is_ultra_restricted)
    shared: bool = False  # Slack Connect (is_ext_shared) or otherwise shared with another team
    direct: bool = False  # a DM, a group DM or an assistant thread's DM


LearningState = Literal["backfilling", "live", "error"]


@dataclass(frozen=True, kw_only=True)
class LearnedChannel:
    """A channel chosen to learn from, as `relaybot sources` and the admin views show it."""

    place: ChannelPlace
    name: str
    private: bool
    since_days: int  # how far back its history is read
    keep_days: int | None = None  # messages older than this are purged; None: kept
    state: LearningState = "backfilling"
    error: str = ""  # the sentence of the last failure, while state is "error"
    done: int = 0  # messages read so far
    total: int | None = None  # messages to read, once known
    eta_s: float | None = None  # the backfill's time left at its pace so far
    added_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class Audience:
    """Everyone who will see an answer, as the visibility rule needs it: where it is posted and who asked.

    `direct`: a DM or an assistant thread (only the asker sees it). None of an answer's audience (a resumed run,
    a caller that does not say) sees no learned channel at all."""

    platform: str
    workspace: str
    channel: str
    asker: str
    direct: bool = False


# What the platforms tell the engine about learned channels as it happens (ChannelLearning.take).
ChangeKind = Literal["message", "deleted", "renamed", "left", "member"]


@dataclass(frozen=True, kw_only=True)
class ChannelChange:
    """One live event about a channel: a new or edited message (`message`), a deleted one (`message_id`; with
    `thread_gone`, the whole thread that root began, replies included: Discord's thread delete), a rename (`name`),
    the bot removed or the channel archived or deleted (`left`), or someone joining or leaving it (`member`: `user` —
    the readers' cache forgets that person)."""

    kind: ChangeKind
    place: ChannelPlace
    message: ChannelMessage | None = None
    message_id: str = ""
    name: str = ""
    user: str = ""
    thread_gone: bool = False
