"""Signs started while a question's event is being recorded (before Bolt's ack), held for the listener that answers it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from adapters.gate import Admission

from .surface import ReplyTarget
from .working import WorkingSign

# Early signs waiting at once (a burst's worth); past them a question's sign goes up after its record, as before.
EARLY_SIGNS_MAX = 1_000
# Real seconds a recorded event's sign waits for its listener (which runs right after the ack); past them the
# listener is taken never to run (Bolt failed it, or no listener takes the event) and the sign comes down.
TAKE_WITHIN_S = 5.0
# Real seconds close() gives the signs it takes down.
CLOSE_WAIT_S = 5.0


@dataclass(eq=False, kw_only=True)
class _Early:
    sign: WorkingSign
    recording: int = 0  # deliveries of this event whose record is still being written
    answered: bool = False  # one of those records was new: a listener of this process will answer it
    expiry: asyncio.TimerHandle | None = field(default=None)


class EarlySigns:
    """One per adapter, keyed by event id: one sign per event however many deliveries record it at once.

    A sign is taken by the listener the gate lets answer (`take`, in the same step as the gate's answer); it comes
    down when no record of its event was new (a duplicate, or the database down: Slack redelivers), when the
    listener returns without taking it (`settle`), when no listener takes it in time, and at close."""

    def __init__(self, *, max_signs: int = EARLY_SIGNS_MAX, take_within_s: float = TAKE_WITHIN_S) -> None:
        self.max_signs = max_signs
        self.take_within_s = take_within_s
        self._signs: dict[str, _Early] = {}
        self._ending: set[asyncio.Task[None]] = set()
        self._open = True

    def __len__(self) -> int:
        return len(self._signs)

    def ahead(self, event_id: str, make: Callable[[], WorkingSign]) -> None:
        """A signed question has just arrived, before Bolt's dispatch: its sign goes up now, for its record to keep
        (`recording`); taken down if no record of it comes within `take_within_s`."""
        if event_id in self._signs or not self._open or not event_id or len(self._signs) >= self.max_signs:
            return
        entry = self._signs[event_id] = _Early(sign=make())
        entry.sign.show()
        entry.expiry = asyncio.get_running_loop().call_later(self.take_within_s, self._expire, event_id, entry)

    def recording(self, event_id: str, make: Callable[[], WorkingSign]) -> bool:
        """A delivery's record is starting: its event's sign goes up now (once per event). False: none (full, closed)."""
        entry = self._signs.get(event_id)
        if entry is None:
            if not self._open or not event_id or len(self._signs) >= self.max_signs:
                return False
            entry = self._signs[event_id] = _Early(sign=make())
            entry.sign.show()
        elif entry.expiry is not None and entry.recording == 0 and not entry.answered:
            entry.expiry.cancel()  # the sign put up ahead: its record now decides
            entry.expiry = None
        entry.recording += 1
        return True

    def recorded(self, event_id: str, admission: Admission) -> asyncio.Task[None] | None:
        """A delivery's record is written (or not); the sign's end under way when no record of its event was new."""
        entry = self._signs.get(event_id)
        if entry is None:  # taken, expired or closed meanwhile
            return None
        entry.recording -= 1
        entry.answered = entry.answered or admission == "new"
        if entry.recording > 0:
            return None
        if not entry.answered:
            return self._end(event_id)
        if entry.expiry is None:
            entry.expiry = asyncio.get_running_loop().call_later(self.take_within_s, self._expire, event_id, entry)
        return None

    def take(self, event_id: str) -> WorkingSign | None:
        """The listener answering the event takes its sign over (None: there is none; it makes its own)."""
        entry = self._signs.pop(event_id, None)
        if entry is None:
            return None
        if entry.expiry is not None:
            entry.expiry.cancel()
        return entry.sign

    @contextmanager
    def settled(self, body: dict[str, Any]) -> Iterator[None]:
        """Around a listener: however it ends, its event's sign that it did not take comes down."""
        try:
            yield
        finally:
            self.settle(str(body.get("event_id") or ""))

    def settle(self, event_id: str) -> None:
        """A listener of the event has returned: a sign it did not take, and no record still awaits, comes down.

        Safe beside a second delivery of the event: the listener the gate lets answer takes the sign in the same step
        as the gate's answer, so a listener told "taken" returns either before the new record (still awaited) or
        after the sign was taken."""
        entry = self._signs.get(event_id)
        if entry is not None and entry.recording == 0:
            self._end(event_id)

    async def close(self) -> None:
        """Shutdown: no new early sign; every one still waiting comes down (bounded)."""
        self._open = False
        for event_id in list(self._signs):
            self._end(event_id)
        if self._ending:
            await asyncio.wait(set(self._ending), timeout=CLOSE_WAIT_S)

    def _expire(self, event_id: str, entry: _Early) -> None:
        if self._signs.get(event_id) is not entry:
            return
        if entry.recording:
            entry.expiry = None  # a record under way decides; recorded() sets the next expiry
            return
        self._end(event_id)

    def _end(self, event_id: str) -> asyncio.Task[None]:
        entry = self._signs.pop(event_id)
        if entry.expiry is not None:
            entry.expiry.cancel()
        task = asyncio.get_running_loop().create_task(entry.sign.end())
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)
        return task


def reply_target(body: dict[str, Any], event: dict[str, Any]) -> ReplyTarget:
    """Where a question's answer and its first sign go, for the record's early sign and the listener alike: a mention's
    thread (the mention starts one), a DM's thread or its top level, a follow-up's thread; 👀 on the question."""
    ts = str(event.get("ts") or "")
    thread_ts = str(event.get("thread_ts") or "") or None
    if event.get("type") == "app_mention":
        thread_ts = thread_ts or ts
    return ReplyTarget(team_id=str(body.get("team_id") or event.get("team") or ""), channel=str(event.get("channel", "")),
                       thread_ts=thread_ts, question_ts=ts or None)
