"""One answer's messages on the platform: each part's state, and its post (recorded before it goes, keyed against repeats, told after) and edits, each bounded by the call deadline."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .deadline import CallDeadline
from .transport import MessageTransport, RateLimited, TransientSendError

# The editor task's lines keep the streamer's logger whichever step writes them (log filters name it).
logger = logging.getLogger("adapters.streaming.streamer")

OnMessagePosted = Callable[[str], Awaitable[None]]
# Asked before each post of a part once the final is kept (part index, when a post of it was last attempted
# without its outcome seen, epoch seconds, or None): records the attempt; False means the final was handed
# to another process, and this streamer must post nothing more.
OnPostAttempt = Callable[[int, float | None], Awaitable[bool]]
# Told before the first post of each message (its part index, the attempt's time, epoch seconds), so a record of it
# exists before the platform can make it: a process dying before it sees the reply leaves a message to look up.
OnPostIntent = Callable[[int, float], Awaitable[None]]


@dataclass(kw_only=True)
class Slot:
    """One platform message of the answer."""

    index: int  # the answer's part it shows
    message_id: str | None = None
    shown: str | None = None  # the last text the platform accepted
    target: str | None = None  # the text it must end with, once known
    has_text: bool = False  # it has shown answer text, not only the placeholder
    text_since: float = 0.0  # when it first showed answer text
    next_send_at: float = float("-inf")
    attempted_at: float | None = None  # a post was sent and its outcome not seen (epoch seconds)


class PartMessages:
    """Posts and edits the answer's messages through its transport."""

    def __init__(
        self, transport: MessageTransport, *, call: CallDeadline, idempotency_key: str | None,
        on_message_posted: OnMessagePosted | None, on_post_attempt: OnPostAttempt | None,
        on_post_intent: OnPostIntent | None,
    ) -> None:
        self._transport = transport
        self._call = call
        self._idempotency_key = idempotency_key
        self._on_message_posted = on_message_posted
        self._on_post_attempt = on_post_attempt
        self._on_post_intent = on_post_intent
        self.handed_over = False  # the final went to another process: nothing more is posted

    async def edit(self, slot: Slot, text: str) -> None:
        assert slot.message_id is not None
        await self._call(self._transport.edit(slot.message_id, text))

    async def may_post(self, slot: Slot, *, kept: bool) -> bool:
        """Once the final is `kept`, each post is recorded first, and only while this process still owns it."""
        if self.handed_over:
            return False
        if not kept or self._on_post_attempt is None:
            return True
        try:
            owned = await self._on_post_attempt(slot.index, slot.attempted_at)
        except Exception:
            # Unrecorded, a post could be repeated by whoever delivers next: not now (the loop retries).
            logger.exception("could not record a post attempt; trying again")
            raise TransientSendError("post attempt not recorded") from None
        if not owned:
            logger.info("the final was handed to another process; this one posts nothing more")
            self.handed_over = True
        return owned

    async def post(self, slot: Slot, text: str) -> None:
        """Posts `slot`'s message, keyed by the answer and part, its attempt recorded until its outcome is seen."""
        key = None if self._idempotency_key is None else f"{self._idempotency_key}:{slot.index}"
        first = slot.attempted_at is None
        slot.attempted_at = slot.attempted_at or time.time()
        if first and self._on_post_intent is not None:
            try:
                await self._on_post_intent(slot.index, slot.attempted_at)
            except Exception:
                # The post goes anyway: an answer is worth more than its crash repair.
                logger.exception("on_post_intent failed")
        try:
            slot.message_id = await self._call(self._transport.post(text, key=key))
        except RateLimited:
            if first:
                slot.attempted_at = None  # nothing was posted (an earlier unseen attempt would stay recorded)
            raise
        slot.attempted_at = None
        if self._on_message_posted is not None:
            try:
                await self._on_message_posted(slot.message_id)
            except Exception:
                logger.exception("on_message_posted failed for message %s", slot.message_id)
