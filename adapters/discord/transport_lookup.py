"""Finding a message an attempt posted when its reply never came: read back from the attempt's time, known by its text."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone

import discord

from adapters.streaming import RateLimited, TransientSendError

from .transport_http import OutcomeUnknown, guarded

log = logging.getLogger(__name__)

# How many messages after an attempt are read to find what it posted (one history call).
LOOKUP_MESSAGES = 50
# Discord's clock and ours may differ; a look-up reads from this long before the attempt.
LOOKUP_SKEW_S = 30.0

Matches = Callable[[discord.Message], bool]


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


def self_id(channel: object) -> int | None:
    """The bot's own user id, from the connection state discord.py gives every channel object."""
    state = getattr(channel, "_state", None)
    return getattr(state, "self_id", None)


def same_text(content: str) -> Matches:
    """A message showing `content` (Discord trims the ends of what it stores)."""
    wanted = content.strip()
    return lambda message: message.content.strip() == wanted


async def find_posted(channel: discord.abc.Messageable, *, since: datetime, matches: Matches) -> discord.Message | None:
    """The bot's message posted at or after `since` (less the clock skew) that `matches`, oldest first.

    Discord does not return a message's nonce when it is read back, so the part is known by its text."""
    me = self_id(channel)
    after = discord.Object(discord.utils.time_snowflake(since - timedelta(seconds=LOOKUP_SKEW_S)))

    async def scan() -> discord.Message | None:
        async for message in channel.history(limit=LOOKUP_MESSAGES, after=after, oldest_first=True):
            if (me is None or message.author.id == me) and matches(message):
                return message
        return None

    return await guarded(scan())


class PostOnce:
    """One message that must appear once: sent, and after a failure whose outcome was not seen, looked up
    (from the first attempt's time) before it is sent again. It is known by the text an attempt sent (a
    streamed post's text grows between attempts) or by `matches`, and always `replies_to` the message it
    was sent in reply to (two answers in one channel may both show the placeholder). `attempted_at` seeds
    an attempt another process made (the outbox records it)."""

    def __init__(
        self, channel: discord.abc.Messageable, *, matches: Matches | None = None, attempted_at: datetime | None = None,
        replies_to: int | None = None,
    ) -> None:
        self._channel = channel
        self._matches = matches
        self._replies_to = replies_to
        self._texts: set[str] = set()
        self.attempted_at = attempted_at

    def _is_ours(self, message: discord.Message) -> bool:
        if self._replies_to is not None and getattr(message.reference, "message_id", None) != self._replies_to:
            return False
        if message.content.strip() in self._texts:
            return True
        return self._matches is not None and self._matches(message)

    async def __call__(self, send: Callable[[], Awaitable[discord.Message]], *, text: str | None = None) -> discord.Message:
        if text:
            self._texts.add(text.strip())
        if self.attempted_at is not None:
            found = await find_posted(self._channel, since=self.attempted_at, matches=self._is_ours)
            if found is not None:
                log.info("message %s was posted by an attempt whose reply was lost; not posting it again", found.id)
                self.attempted_at = None
                return found
        earlier = self.attempted_at
        self.attempted_at = earlier or now_utc()
        try:
            message = await guarded(send())
        except OutcomeUnknown:
            raise
        except (RateLimited, TransientSendError):
            # Refused before anything was done (a 429, Missing Permissions): nothing to look up for this one.
            self.attempted_at = earlier
            raise
        self.attempted_at = None
        return message
