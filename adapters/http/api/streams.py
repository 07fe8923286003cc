"""Answer streams that outlive their connection: numbered events kept in memory and journaled in batches for reconnects."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from adapters.http.api.events import TERMINAL, ApiEvent
from core.api_access import EventLog, JournalEvent

log = logging.getLogger(__name__)

# A stream's events reach Postgres at most this often (a few writes a second, however fast the model).
FLUSH_INTERVAL_S = 0.25
# A finished stream stays in memory this long for a quick reconnect; afterwards the journal answers.
KEEP_FINISHED_S = 60.0
# A reconnect to a stream another process runs looks at the journal this often, and less often while it is quiet.
JOURNAL_POLL_S = 0.3
JOURNAL_POLL_MAX_S = 3.0
# An event id the journal does not hold after this long (its batch is written within FLUSH_INTERVAL_S) is unknown.
UNKNOWN_STREAM_WAIT_S = 1.0
# ...and gives up when the journal has shown nothing new for this long (the client may reconnect again).
JOURNAL_IDLE_GIVE_UP_S = 120.0
# Reconnects a key may hold open at once in one process (each may poll the journal); more get 429.
RECONNECTS_PER_KEY = 4

Producer = Callable[[], AsyncIterator[ApiEvent]]


class ReconnectsFull(Exception):
    """The key holds as many reconnects open in this process as it may."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"This key has {cap} reconnected streams open already; close one and try again.")


@dataclass(eq=False)
class _Stream:
    stream_id: uuid.UUID
    key_id: int
    events: list[JournalEvent] = field(default_factory=list)
    unflushed: list[JournalEvent] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False

    def add(self, name: str, data: dict) -> None:  # type: ignore[type-arg]
        event = JournalEvent(seq=len(self.events) + 1, event=name, data=data)
        self.events.append(event)
        self.unflushed.append(event)
        self.changed.set()


class StreamHub:
    """Runs each stream's producer in its own task, so a dropped connection loses nothing; readers follow by number."""

    def __init__(self, journal: EventLog) -> None:
        self._journal = journal
        self._streams: dict[uuid.UUID, _Stream] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._reconnects: Counter[int] = Counter()

    def start(self, key_id: int, produce: Producer, *, stream_id: uuid.UUID | None = None) -> uuid.UUID:
        """Run `produce` as a new stream; `stream_id` names it when a later request must find it by what it
        continues (e.g. /v1's resend of a tool round)."""
        stream = _Stream(stream_id=stream_id or uuid.uuid4(), key_id=key_id)
        self._streams[stream.stream_id] = stream
        task = asyncio.create_task(self._run(stream, produce), name=f"api-stream-{stream.stream_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return stream.stream_id

    async def follow(self, stream_id: uuid.UUID, key_id: int, after: int, *, keepalive_s: float
                     ) -> AsyncIterator[JournalEvent | None]:
        """Events numbered above `after` until the stream ends; None when nothing came for `keepalive_s`.

        From memory when this process runs the stream, else from the journal (another process's, or a finished one).
        """
        stream = self._streams.get(stream_id)
        if stream is not None and stream.key_id == key_id:
            async for event in self._follow_memory(stream, after, keepalive_s):
                yield event
            return
        async for event in self._follow_journal(stream_id, key_id, after, keepalive_s):
            yield event

    async def knows(self, stream_id: uuid.UUID, key_id: int, after: int) -> bool:
        """Whether this key's stream has sent event `after`: in memory, or in the journal once its batch is written.

        Ids start at 1, so no client was sent `after` 0: that is known only for a stream this process runs (for
        anything else it would mean following a stream nobody may know exists).
        """
        stream = self._streams.get(stream_id)
        if stream is not None:
            return stream.key_id == key_id and after <= len(stream.events)
        if after <= 0:
            return False
        waited = 0.0
        while True:
            if await self._journal.after(stream_id, key_id, after - 1):
                return True
            if waited >= UNKNOWN_STREAM_WAIT_S:
                return False
            await asyncio.sleep(JOURNAL_POLL_S)
            waited += JOURNAL_POLL_S

    def reconnect(self, key_id: int) -> contextlib.ExitStack:
        """One of the key's reconnect slots in this process, given back when the returned stack closes (hold it
        while following); ReconnectsFull at once when the key holds RECONNECTS_PER_KEY already."""
        if self._reconnects[key_id] >= RECONNECTS_PER_KEY:
            raise ReconnectsFull(RECONNECTS_PER_KEY)
        self._reconnects[key_id] += 1
        slot = contextlib.ExitStack()
        slot.callback(self._release, key_id)
        return slot

    def _release(self, key_id: int) -> None:
        self._reconnects[key_id] -= 1
        if self._reconnects[key_id] <= 0:
            del self._reconnects[key_id]

    async def close(self) -> None:
        """Flush what is left of running streams (their runs end with the engine's drain)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _follow_memory(self, stream: _Stream, after: int, keepalive_s: float) -> AsyncIterator[JournalEvent | None]:
        position = after
        while True:
            while position < len(stream.events):
                position += 1
                yield stream.events[position - 1]
            if stream.ended:
                return
            stream.changed.clear()
            try:
                await asyncio.wait_for(stream.changed.wait(), keepalive_s)
            except asyncio.TimeoutError:
                yield None

    async def _follow_journal(self, stream_id: uuid.UUID, key_id: int, after: int, keepalive_s: float
                              ) -> AsyncIterator[JournalEvent | None]:
        position = after
        idle = quiet = 0.0
        while True:
            events = await self._journal.after(stream_id, key_id, position)
            for event in events:
                position = event.seq
                yield event
                if event.event in TERMINAL:
                    return
            if events:
                idle = quiet = 0.0
                continue
            if idle >= JOURNAL_IDLE_GIVE_UP_S:
                return
            # Quiet for long (a slow tool elsewhere): look less often, up to JOURNAL_POLL_MAX_S.
            poll_s = min(JOURNAL_POLL_MAX_S, max(JOURNAL_POLL_S, idle / 10))
            await asyncio.sleep(poll_s)
            idle += poll_s
            quiet += poll_s
            if quiet >= keepalive_s:
                quiet = 0.0
                yield None

    async def _run(self, stream: _Stream, produce: Producer) -> None:
        flusher = asyncio.create_task(self._flush_every(stream))
        try:
            async for name, data in produce():
                stream.add(name, data)
        except Exception:
            log.exception("API stream %s failed", stream.stream_id)
            stream.add("error", {"message": "The answer stopped on an unexpected error.", "kind": "failed"})
        finally:
            stream.ended = True
            stream.changed.set()
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
            await self._flush(stream)
            asyncio.get_running_loop().call_later(KEEP_FINISHED_S, self._streams.pop, stream.stream_id, None)

    async def _flush_every(self, stream: _Stream) -> None:
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            await self._flush(stream)

    async def _flush(self, stream: _Stream) -> None:
        batch, stream.unflushed = stream.unflushed, []
        if not batch:
            return
        try:
            await self._journal.append(stream.stream_id, stream.key_id, batch)
        except Exception:
            # A reader in this process still has every event; only a reconnect elsewhere would miss these.
            log.warning("could not journal %d events of stream %s; trying again", len(batch), stream.stream_id,
                        exc_info=True)
            stream.unflushed = batch + stream.unflushed


def event_id(stream_id: uuid.UUID, seq: int) -> str:
    return f"{stream_id}:{seq}"


def parse_event_id(value: str) -> tuple[uuid.UUID, int] | None:
    stream, _, seq = value.strip().rpartition(":")
    try:
        return uuid.UUID(stream), int(seq)
    except ValueError:
        return None


