"""Tools the agent may call: specs and registry, the executor, the approval policy and the built-ins."""

from __future__ import annotations

from core.tools.calculator import CALCULATOR
from core.tools.clock import current_time_tool
from core.tools.executor import ParsedCall, ToolCallRequest, ToolExecutor, ToolResult, truncate_middle
from core.tools.policy import ApprovalPolicy
from core.tools.context import ToolContext, ToolServices
from core.tools.registry import ToolError, ToolRegistry, ToolSpec


def builtin_registry(*, default_timezone: str = "UTC") -> ToolRegistry:
    """A fresh registry holding the tools that need no database: `calculator` and `current_time`."""
    return ToolRegistry([CALCULATOR, current_time_tool(default_timezone=default_timezone)])


__all__ = [
    "ApprovalPolicy",
    "CALCULATOR",
    "ParsedCall",
    "ToolCallRequest",
    "ToolContext",
    "ToolError",
    "ToolExecutor",
    "ToolRegistry",
    "ToolResult",
    "ToolServices",
    "ToolSpec",
    "builtin_registry",
    "current_time_tool",
    "truncate_middle",
]
