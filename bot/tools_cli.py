"""`relaybot tools`: every tool the bot offers (built-in and MCP), whether each needs approval, and why."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from core.config import Settings
from core.tools import ToolRegistry
from core.tools.approval_policy import PolicyLayer, ToolApprovals, settings_layers
from core.tools.internal_search import INTERNAL_SEARCH
from core.tools.mcp.tools import McpTools, ServerStatus

EXIT_OK = 0
EXIT_USAGE = 2
DEFAULT_WAIT_S = 10.0
HEADER = ("tool", "from", "approval", "why")


@dataclass(frozen=True)
class ToolLine:
    tool: str
    source: str
    approval: str
    why: str


def add_tools_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("tools", help="list the tools (built-in and MCP), whether each needs approval, and why")
    parser.add_argument(
        "--wait", type=float, default=DEFAULT_WAIT_S, metavar="SECONDS",
        help=f"how long to wait for each MCP server to connect (default: {DEFAULT_WAIT_S:g})",
    )


async def tools(settings: Settings, args: argparse.Namespace) -> int:
    registry = builtin_tools(settings)
    layers: list[PolicyLayer] = list(settings_layers(settings.tool_approval_policy, settings.tool_approval_overrides))
    mcp: McpTools | None = None
    servers: list[ServerStatus] = []
    try:
        if settings.mcp_servers:
            mcp = McpTools.from_settings(settings)
            await mcp.start(wait_s=max(args.wait, 0.0))
            registry.add_provider(mcp)
            layers += mcp.approval_layers()
            servers = mcp.servers()
        approvals = ToolApprovals(layers)
        mcp_names = {name: status.config.name for status in servers for name, _ in status.tools}
        lines = [line_for(approvals, registry, name, mcp_names.get(name)) for name in registry.names()]
    finally:
        if mcp is not None:
            await mcp.close()
    print(render(lines, servers, wait_s=args.wait), end="")
    unknown = approvals.unknown_names(registry.owns)
    if unknown:
        print(f"relaybot: the approval settings name tools that do not exist: {'; '.join(unknown)}; "
              "`relaybot run` refuses to start until they are fixed.", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def builtin_tools(settings: Settings) -> ToolRegistry:
    """The tools `relaybot run` registers, built without opening a database (sql_query without its schema)."""
    from bot.runtime import build_registry
    from core.tools.sql_query import SqlQueryConfig, sql_query_spec

    registry = build_registry(settings)
    registry.register(INTERNAL_SEARCH)  # the engine's own; every run process has a retriever
    config = SqlQueryConfig.from_settings(settings)
    if config is not None:
        registry.register(sql_query_spec(config, schema=""))
    return registry


def line_for(approvals: ToolApprovals, registry: ToolRegistry, name: str, server: str | None) -> ToolLine:
    spec = registry.get(name)
    assert spec is not None  # listed by the registry a moment ago, and nothing ran since
    summary = approvals.summary(spec)
    why = summary.reason + (" (MCP tools need approval unless trusted)" if server and summary.reason == "tool default" else "")
    return ToolLine(tool=name, source=f"MCP {server}" if server else "built-in", approval=summary.listing, why=why)


def render(lines: list[ToolLine], servers: list[ServerStatus], *, wait_s: float) -> str:
    rows = [HEADER, *((line.tool, line.source, line.approval, line.why) for line in lines)]
    widths = [max(len(row[index]) for row in rows) for index in range(len(HEADER))]
    out = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    for status in servers:
        where = status.config.describe()
        if status.state == "up":
            out.append(f"MCP server {status.config.name} ({where}): connected, {len(status.tools)} tools.")
        elif status.state == "down":
            out.append(f"MCP server {status.config.name} ({where}): down ({status.error}); its tools are not listed.")
        else:
            out.append(f"MCP server {status.config.name} ({where}): not connected after {wait_s:g} s; its tools are not listed.")
    return "\n".join(out) + "\n"
