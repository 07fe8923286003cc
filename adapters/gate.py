"""Whether this process takes an event: not shutting down, an allowed workspace, new (not a redelivery), and
within a channel's answer-everything cap."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

from adapters.held import DATABASE_DOWN, EventNotRecorded, HeldEvents, Step
from core.ports import EventDedup

log = logging.getLogger(__name__)

# The dedup insert is the event's durable record; where a platform waits for the ack (Slack: 3 s), a
# database that does not answer by then counts as down, so the event is refused and redelivered.
RECORD_TIMEOUT_S = 2.0
# Outcomes recorded before the ack and not yet asked for by a listener (events no listener takes).
ADMITTED_MAX = 10_000

Admission = Literal["new", "taken", "unavailable"]
# An unmentioned top-level message in a respond_to=all channel: answered, told once a window to mention the bot
# (one sentence), or marked with a reaction (the rest of that window), so none is dropped without a sign.
CapTurn = Literal["answer", "tell", "mark"]
CAP_WINDOW_S = 60.0
CAP_CHANNELS_MAX = 10_000
OVER_CAP_REACTION = "✋"  # Slack names it raised_hand

__all__ = ["DATABASE_DOWN", "Admission", "AnswerAllCap", "CapTurn", "EventNotRecorded", "Gate"]


class Gate:
    """Shared by every handler of one platform: messages, commands and clicks."""

    def __init__(self, *, platform: str, allowed_workspaces: tuple[str, ...], setting: str, dedup: EventDedup) -> None:
        self.platform = platform
        self._allowed = frozenset(allowed_workspaces)
        self._setting = setting
        self._dedup = dedup
        self.accepting = True
        self._tasks: set[asyncio.Task[object]] = set()
        self._admitted: OrderedDict[str, Admission] = OrderedDict()
        self._held = HeldEvents(platform=platform)

    def allows(self, workspace: str | None, *, org: str | None = None, quiet: bool = False) -> bool:
        """No allowlist, or a workspace (or the org it belongs to: a Slack Grid org's E…) on it; None (a DM) passes.
        `quiet`: a look ahead, whose refusal the event's own check logs."""
        if workspace is None or not self._allowed or workspace in self._allowed or (org and org in self._allowed):
            return True
        if quiet:
            return False
        log.info("ignoring a %s event from %s, which is not in %s", self.platform, workspace, self._setting)
        return False

    async def admit(self, event_id: str, *, timeout_s: float = RECORD_TIMEOUT_S) -> Admission:
        """Before the ack: write the event's record; "unavailable" when the database cannot (do not ack then).
        The outcome is kept for the listener's first_time."""
        try:
            new = await asyncio.wait_for(self._dedup.first_time(self.platform, event_id), timeout_s)
        except Exception as error:
            log.warning("could not record %s event %s (%r); not acknowledging it", self.platform, event_id, error)
            return "unavailable"
        self.hand_on(event_id, "new" if new else "taken")
        return "new" if new else "taken"

    def hand_on(self, event_id: str, admission: Admission) -> None:
        """What the listener of this event will be told by first_time (bounded: events no listener takes).
        Two deliveries of one event at once (a retry beside the first) are told apart by their writes: one "new",
        one "taken", in either order; the "new" is kept, so one listener takes it and the other asks again."""
        if self._admitted.get(event_id) != "new":
            self._admitted[event_id] = admission
        while len(self._admitted) > ADMITTED_MAX:
            self._admitted.popitem(last=False)

    async def first_time(self, event_id: str) -> bool:
        """True for exactly one handler per event id, whichever process it runs in; no id counts as new.
        Raises EventNotRecorded when the record cannot be written (the database is down)."""
        if not event_id:
            return True
        admission = self._admitted.pop(event_id, None)
        if admission is None:
            try:
                new = await asyncio.wait_for(self._dedup.first_time(self.platform, event_id), RECORD_TIMEOUT_S)
                admission = "new" if new else "taken"
            except Exception as error:
                raise EventNotRecorded(f"{self.platform} event {event_id}") from error
        if admission == "unavailable":
            raise EventNotRecorded(f"{self.platform} event {event_id}")
        if admission == "new":
            return True
        log.info("%s event %s was already taken (a redelivery, or another process)", self.platform, event_id)
        return False

    def hold(self, event_id: str, *, take: Step, tell: Step) -> None:
        """Where nothing redelivers: `take` the event again until the database is back (once per event id);
        `tell` the asker instead when the queue is full, the database stays down too long, or the process stops."""
        self._held.hold(event_id, take=take, tell=tell)

    @property
    def held(self) -> int:
        return len(self._held)

    @contextmanager
    def track(self) -> Iterator[None]:
        """Remembers the running handler task, so close() can cancel what is left."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            yield
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def cancel_handlers(self, timeout_s: float) -> None:
        """Cancel handlers still running (at close) and wait for them up to timeout_s."""
        self.accepting = False
        left = await self._held.release(timeout_s)
        tasks = [task for task in [*self._tasks, *left] if not task.done() and task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)


class AnswerAllCap:
    """At most `per_minute` unmentioned answers per channel in any 60 s (RESPOND_ALL_PER_MINUTE, per process):
    a #help channel in a flood must not spend the model's budget, or the platform's, on every line. A mention is
    never counted nor capped."""

    def __init__(self, *, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self._answered: OrderedDict[str, deque[float]] = OrderedDict()
        self._told: dict[str, float] = {}

    def take(self, channel: str) -> CapTurn:
        now = self.clock()
        times = self._answered.pop(channel, None) or deque()
        while times and now - times[0] >= CAP_WINDOW_S:
            times.popleft()
        self._answered[channel] = times  # most recently seen last, so the idlest go first past the bound
        while len(self._answered) > CAP_CHANNELS_MAX:
            dropped, _ = self._answered.popitem(last=False)
            self._told.pop(dropped, None)
        if len(times) < self.per_minute:
            times.append(now)
            return "answer"
        told = self._told.get(channel)
        if told is None or now - told >= CAP_WINDOW_S:
            self._told[channel] = now
            return "tell"
        return "mark"


def over_cap_sentence(per_minute: int) -> str:
    """What the first message past the cap is told in its thread (later ones get OVER_CAP_REACTION)."""
    many = "one message" if per_minute == 1 else f"{per_minute} messages"
    return (f"✋ I answer at most {many} a minute here without a mention, and that is reached: mention me to have "
            f"this one answered (messages marked {OVER_CAP_REACTION} were not answered either).")
