"""Client-executed tools: a request's declared tools as per-run ToolSpecs that never run here, and the executor offering them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.requests import ClientTool
from core.tools.context import ToolContext
from core.tools.executor import ToolExecutor
from core.tools.registry import ToolError, ToolSpec

# A result the client sends is text for the model like any tool's output, capped the same way.
CLIENT_RESULT_MAX_CHARS = 8000


async def _never_here(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    # The agent pauses on a client-side call before anything would run it; reaching this is a bug.
    raise ToolError("This tool runs on the client; its result comes with the continuation.")


def client_spec(tool: ClientTool) -> ToolSpec:
    """The tool as a spec (ValueError names what is wrong with its name or schema)."""
    return ToolSpec(
        name=tool.name, description=tool.description, parameters=dict(tool.parameters), run=_never_here,
        client_side=True, max_output_chars=CLIENT_RESULT_MAX_CHARS,
    )


def client_tool_json(tool: ClientTool) -> dict[str, Any]:
    """As stored in a paused run's state, so a resumed run offers the same tools."""
    return {"name": tool.name, "description": tool.description, "parameters": dict(tool.parameters)}


def client_tools_from_json(items: Sequence[Mapping[str, Any]]) -> tuple[ClientTool, ...]:
    return tuple(
        ClientTool(name=str(item["name"]), description=str(item.get("description", "")),
                   parameters=dict(item.get("parameters") or {"type": "object"}))
        for item in items
    )


def with_client_tools(executor: ToolExecutor, tools: Sequence[ClientTool]) -> ToolExecutor:
    """An executor over the engine's tools plus these (one run's); ValueError when a name is taken or malformed."""
    if not tools:
        return executor
    registry = executor.registry.copy()
    for tool in tools:
        registry.register(client_spec(tool))
    return ToolExecutor(registry, approvals=executor.approvals)
