"""Whether this process takes an event: not shutting down, an allowed workspace, and new (not a redelivery)."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Iterator
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

__all__ = ["DATABASE_DOWN", "Admission", "EventNotRecorded", "Gate"]


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

    def allows(self, workspace: str | None) -> bool:
        """No allowlist, or a workspace on it; None (a Discord DM) passes."""
        if workspace is None or not self._allowed or workspace in self._allowed:
            return True
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
