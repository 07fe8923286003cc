"""current_time answers in UTC or a named IANA zone and refuses unknown zones."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.requests import ConversationKey

from core.tools import ToolContext, ToolError, current_time_tool

CTX = ToolContext(user="U1", conversation_id=None, conversation=ConversationKey(platform="test", workspace="W", channel="C1"))
FIXED = datetime(2025, 1, 2, 14, 4, 5, tzinfo=UTC)


async def test_defaults_to_utc() -> None:
    tool = current_time_tool(now=lambda: FIXED)
    assert await tool.run(CTX, {}) == "2025-01-02T14:04:05+00:00\nThursday, 2 January 2025, 14:04:05 UTC (UTC)"


async def test_named_timezone() -> None:
    tool = current_time_tool(now=lambda: FIXED)
    output = await tool.run(CTX, {"timezone": "Europe/Paris"})
    assert output == "2025-01-02T15:04:05+01:00\nThursday, 2 January 2025, 15:04:05 CET (Europe/Paris)"


async def test_configured_default_timezone() -> None:
    tool = current_time_tool(default_timezone="Asia/Tokyo", now=lambda: FIXED)
    assert (await tool.run(CTX, {"timezone": " "})).startswith("2025-01-02T23:04:05+09:00")


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "/etc/passwd", "../zoneinfo/UTC", "X" * 100])
async def test_unknown_timezone_is_a_tool_error(zone: str) -> None:
    tool = current_time_tool(now=lambda: FIXED)
    with pytest.raises(ToolError):
        await tool.run(CTX, {"timezone": zone})
