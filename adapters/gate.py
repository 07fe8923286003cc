"""Whether this process takes an event: not shutting down, an allowed workspace, and new (not a redelivery)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from core.ports import EventDedup

log = logging.getLogger(__name__)


class Gate:
    """Shared by every handler of one platform: messages, commands and clicks."""

    def __init__(self, *, platform: str, allowed_workspaces: tuple[str, ...], setting: str, dedup: EventDedup) -> None:
        self.platform = platform
        self._allowed = frozenset(allowed_workspaces)
        self._setting = setting
        self._dedup = dedup
        self.accepting = True
        self._tasks: set[asyncio.Task[object]] = set()

    def allows(self, workspace: str | None) -> bool:
        """No allowlist, or a workspace on it; None (a Discord DM) passes."""
        if workspace is None or not self._allowed or workspace in self._allowed:
            return True
        log.info("ignoring a %s event from %s, which is not in %s", self.platform, workspace, self._setting)
        return False

    async def first_time(self, event_id: str) -> bool:
        """True for exactly one handler per event id, whichever process it runs in; no id counts as new."""
        if not event_id or await self._dedup.first_time(self.platform, event_id):
            return True
        log.info("%s event %s was already taken (a redelivery, or another process)", self.platform, event_id)
        return False

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
        tasks = [task for task in self._tasks if not task.done() and task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
