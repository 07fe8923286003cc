"""The live records of answers' messages while they stream (what crash repair finds), written through database blips,
and the intent record of a post about to be sent."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from adapters.answer_protocols import AnswerPlace
from core import observe
from core.ports import LiveAnswerLog, LiveMessage

log = logging.getLogger(__name__)

# A live record written or dropped during a database blip is tried again after these pauses, then each round.
LIVE_WRITE_RETRY_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)
INTENT_MARK = "intent:"  # a live record of a post about to be sent (no message id yet); see intent_id
# An intent of an answer's first post holds its first characters (no fewer than the minimum, or none).
INTENT_HEAD_CHARS = 48
INTENT_HEAD_MIN_CHARS = 16


class LiveRecords:
    """One platform's live records, as one runner writes them: a write that fails past its retries (the database is
    down) is remembered and redone, in order, on the next round."""

    def __init__(self, live: LiveAnswerLog, *, platform: str) -> None:
        self.log = live
        self._platform = platform
        self._unwritten: list[tuple[str, LiveMessage, str]] = []

    async def record(self, message: LiveMessage) -> None:
        """A live record, written through a database blip; else remembered and written on the next round."""
        await self._write("add", message)

    async def unrecord(self, message: LiveMessage) -> None:
        """A live record dropped through a database blip; else remembered and dropped on the next round, so a
        message whose answer ended (or that was repaired) is never repaired again."""
        await self._write("remove", message)

    async def forget(self, place: AnswerPlace, message_ids: list[str]) -> None:
        for message_id in message_ids:
            await self.unrecord(message_at(place, message_id))

    async def write_unwritten(self) -> None:
        """The writes remembered from rounds the database failed, in order, until one fails again."""
        while self._unwritten:
            try:
                await self._apply(*self._unwritten[0])
            except Exception as error:
                log.warning("live records still not written (%s); %d waiting", error, len(self._unwritten))
                return
            self._unwritten.pop(0)

    async def _write(self, kind: str, message: LiveMessage) -> None:
        # The run being played names the answer a record belongs to (LiveMessages.add): kept for a later round.
        run = observe.current_run()
        write = (kind, message, run.run_id if run is not None else "")
        if self._unwritten:
            # Writes of one message keep their order: a record is never added after its removal.
            self._unwritten.append(write)
            await self.write_unwritten()
            return
        for delay_s in (*LIVE_WRITE_RETRY_S, None):
            try:
                await self._apply(*write)
                return
            except Exception as error:
                if delay_s is None:
                    log.warning("could not %s the live record of message %s (%s); trying again next round",
                                kind, message.message_id, error)
                    self._unwritten.append(write)
                    return
                await asyncio.sleep(delay_s)

    async def _apply(self, kind: str, message: LiveMessage, answer_id: str) -> None:
        if kind == "add" and answer_id:
            with observe.run_scope(run_id=answer_id, platform=self._platform):
                await self.log.add(message)
        elif kind == "add":
            await self.log.add(message)
        else:
            await self.log.remove(platform=message.platform, channel=message.channel, message_id=message.message_id)


def message_at(place: AnswerPlace, message_id: str) -> LiveMessage:
    """The live record of message `message_id` of an answer in `place`."""
    return LiveMessage(platform=place.platform, workspace=place.workspace, channel=place.channel,
                       message_id=message_id, thread=place.thread)


def intent_id(answer_id: str, index: int, at: float, *, after: str | None = None, head: str | None = None) -> str:
    """The live record of a post about to be sent: it names the part's key and the attempt's time, not a message;
    and, for a look-up that has no key to go by, the message the part comes `after` (the answer's part before it)
    and the `head` of the text it shows (the first part: the answer's start). See PostIntent."""
    extras = (f"|after={after}" if after else "") + (f"|head={head}" if head else "")
    return f"{INTENT_MARK}{answer_id}:{index}@{at:.3f}{extras}"


@dataclass(frozen=True, kw_only=True)
class PostIntent:
    """A post's intent record read back (intent_id): its part's key `answer id:index`, the attempt's time (epoch
    seconds), and what else its message is known by."""

    key: str
    index: int
    at: float
    after: str | None = None
    head: str | None = None


def post_intent_of(message_id: str) -> PostIntent | None:
    """The intent a live record's message id names (None: the record is a message's own)."""
    if not message_id.startswith(INTENT_MARK):
        return None
    # The key has no "@" and the time no "|"; the head, which may hold either, comes last.
    key, _, rest = message_id.removeprefix(INTENT_MARK).partition("@")
    at, _, extras = rest.partition("|")
    after = head = None
    if extras.startswith("after="):
        after, _, extras = extras.removeprefix("after=").partition("|")
    if extras.startswith("head="):
        head = extras.removeprefix("head=")
    index = key.rpartition(":")[2]
    return PostIntent(key=key, index=int(index) if index.isdigit() else 0, at=float(at or 0), after=after or None,
                      head=head or None)
