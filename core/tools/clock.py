"""The `current_time` tool: the date and time now, in UTC or a named IANA timezone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core.tools.context import ToolContext
from core.tools.registry import ToolError, ToolSpec

MAX_TIMEZONE_CHARS = 64

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "timezone": {
            "type": "string",
            "description": "An IANA timezone name such as 'Europe/Paris' or 'America/New_York'. Defaults to UTC.",
        }
    },
    "additionalProperties": False,
}


def current_time_tool(
    *, default_timezone: str = "UTC", now: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> ToolSpec:
    """The `current_time` spec; `now` must return an aware datetime (tests pass a fixed one)."""

    async def run(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        name = (arguments.get("timezone") or "").strip() or default_timezone
        # Loading a zone reads a file from disk the first time: keep that off the event loop.
        zone = await asyncio.to_thread(load_timezone, name)
        return describe_time(now().astimezone(zone), name)

    return ToolSpec(
        name="current_time",
        description=f"Get the current date and time, in {default_timezone} unless another IANA timezone is given.",
        parameters=PARAMETERS,
        run=run,
        requires_approval=False,
        timeout_s=5.0,
    )


def load_timezone(name: str) -> ZoneInfo:
    """The zone called `name`; a `ToolError` when there is no such IANA timezone."""
    if len(name) > MAX_TIMEZONE_CHARS:
        raise ToolError("that timezone name is too long to be an IANA timezone.")
    try:
        return ZoneInfo(name)
    # ValueError covers names that are not keys at all (absolute paths, '..').
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ToolError(
            f"unknown timezone {name!r}. Use an IANA name such as 'Europe/Paris', 'Asia/Tokyo' or 'UTC'."
        ) from None


def describe_time(moment: datetime, zone_name: str) -> str:
    """ISO 8601 first (for the model to compute with), then the same moment in words."""
    human = (
        f"{moment:%A}, {moment.day} {moment:%B %Y}, {moment:%H:%M:%S} {moment.tzname()} ({zone_name})"
    )
    return f"{moment.isoformat(timespec='seconds')}\n{human}"
