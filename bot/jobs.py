"""The process's scheduled jobs, each touching only the platforms this process serves."""

from __future__ import annotations

import logging
from collections.abc import Mapping

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
