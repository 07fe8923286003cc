"""create_reminder: a side-effect tool (approval required) that schedules a message in this conversation."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

from core import wording
from core.requests import Reach
from core.tools.context import ToolContext
from core.tools.registry import ToolError, ToolSpec

RELATIVE = re.compile(r"^\s*in\s+(\d+(?:\.\d+)?)\s*(second|minute|hour|day|week)s?\s*$", re.IGNORECASE)
UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
MAX_AHEAD = timedelta(days=366)


def parse_when(value: str, *, now: datetime) -> datetime:
    """An ISO 8601 time (UTC when no offset is given) or 'in N minutes|hours|days|weeks'."""
    match = RELATIVE.match(value)
    if match:
        due = now + timedelta(seconds=float(match.group(1)) * UNIT_SECONDS[match.group(2).lower()])
    else:
        try:
            due = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ToolError(
                f"'{value}' is not a time I understand; use ISO 8601 like 2026-12-01T09:00:00+01:00 or 'in 30 minutes'"
            ) from None
        if due.tzinfo is None:
            due = due.replace(tzinfo=timezone.utc)
    if due > now + MAX_AHEAD:
        raise ToolError("reminders can be at most a year ahead")
    return due


async def _create(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    service = ctx.services.reminders
    if service is None:
        raise ToolError("reminders are not available in this conversation")
    due = parse_when(arguments["when"], now=datetime.now(timezone.utc))
    await service.create(conversation=ctx.conversation, user_id=ctx.user, text=arguments["text"], due_at=due)
    return wording.reminder_created(due)


CREATE_REMINDER = ToolSpec(
    name="create_reminder",
    description="Post a reminder in this conversation at a given time. Needs a person's approval.",
    parameters={
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "description": "What to remind about."},
            "when": {"type": "string", "description": "ISO 8601 time, or 'in 30 minutes', 'in 2 hours', 'in 1 day'."},
        },
        "required": ["text", "when"],
        "additionalProperties": False,
    },
    run=_create,
    requires_approval=True,
    # Only the row is written here; a process serving the conversation's platform posts it when due.
    needs=frozenset({Reach.LATER_POSTS}),
)
