"""The process's scheduled jobs, each touching only the platforms this process serves."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from core.approvals import ApprovalService
from core.notifier import Notifier
from core.retrieval.sync import SourceSyncer

log = logging.getLogger(__name__)


async def expire_approvals(
    approvals: ApprovalService, notifiers: Mapping[str, Notifier], *, without_messages: tuple[str, ...] = ()
) -> int:
    """Close approvals past their expiry and edit their messages on the platform that showed them;
    `without_messages` are platforms that showed none (the HTTP API), whose approvals are only closed."""
    expired = await approvals.expire_due(platforms=(*notifiers, *without_messages))
    for approval in expired:
        notifier = notifiers.get(approval.platform)
        if notifier is None:
            continue
        try:
            await notifier.approval_expired(view=approval.view, message_refs=approval.message_refs)
        except Exception:
            log.exception("could not mark approval %s as expired on %s", approval.view.continuation_id, approval.platform)
    return len(expired)


async def sync_sources(syncer: SourceSyncer) -> int:
    """Sync every source whose interval has passed; the source lease keeps each to one process. How many ran."""
    try:
        return len(await syncer.run_due())
    except Exception:
        # The database may be briefly gone; the next check tries again.
        log.exception("could not look for sources due for a sync")
        return 0


class OneAtATime:
    """A job whose run may outlast its interval (a channel's backfill paced at Slack's 1 call a minute runs for hours):
    each tick starts it as a background task unless it still runs, so runs never overlap and apscheduler has nothing
    to skip (and warn of) every few seconds; a failure is logged and the next tick tries again; `stop()` cancels it."""

    def __init__(self, work: Callable[[], Awaitable[object]], *, what: str) -> None:
        self._work = work
        self._what = what
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def tick(self) -> None:
        """Start a run unless one is under way (or the job is stopped); returns at once."""
        if self._stopped or self.running:
            return
        self._task = asyncio.create_task(self._run(), name=self._what)

    async def _run(self) -> None:
        try:
            await self._work()
        except Exception:
            # The database or the platform may be briefly gone; the next tick tries again.
            log.exception("could not %s; the next check tries again", self._what)

    async def stop(self) -> None:
        """No run starts after this; the one under way is cancelled and awaited."""
        self._stopped = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

