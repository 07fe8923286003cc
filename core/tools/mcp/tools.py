"""The registry's view of MCP servers: specs for the tools of the servers up now, and the layers that trust some.

McpTools is a core.tools.registry.ToolProvider; its approval layers are MCP_SAFE_TOOLS and the read-only hints of
the servers trusted for them: by the entry's own `trust_read_only_hint`, else by MCP_TRUST_READ_ONLY_HINT.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.config import Settings, SettingsError
from core.tools.approval_policy import NEVER, PolicyLayer, PredicateLayer, StaticLayer
from core.tools.context import ToolContext
from core.tools.mcp.config import McpServerConfig, parse_servers, tool_name
from core.tools.registry import ToolRun, ToolSpec

if TYPE_CHECKING:
    from core.tools.mcp.connection import McpConnection, McpTool

log = logging.getLogger(__name__)

EXTRA_HINT = "pip install 'relaybot[mcp]'"
MAX_DESCRIPTION_CHARS = 1024  # what OpenAI accepts for a function's description
READ_ONLY_SOURCE = "MCP read-only hint + MCP_TRUST_READ_ONLY_HINT"
SERVER_TRUST_SOURCE = "MCP read-only hint + MCP_SERVERS {server}.trust_read_only_hint"
SAFE_TOOLS_SOURCE = "MCP_SAFE_TOOLS"


@dataclass(frozen=True, kw_only=True)
class ServerStatus:
    """One server as `relaybot tools` shows it: up or down (and why), and its tools under registry names."""

    config: McpServerConfig
    state: str
    error: str
    tools: tuple[tuple[str, McpTool], ...]


class McpTools:
    """Every configured MCP server's connection, and the tools of those that are up, as registry specs."""

    def __init__(
        self,
        servers: Sequence[McpServerConfig],
        *,
        call_timeout_s: float,
        safe_tools: Collection[str] = (),
        trust_read_only_hint: bool = False,
        **tuning: Any,
    ) -> None:
        from core.tools.mcp.connection import McpConnection  # the `mcp` extra: imported only when servers are set

        self._servers = tuple(servers)
        self._prefixes = tuple(server.prefix for server in self._servers)
        self._call_timeout_s = call_timeout_s
        unknown = sorted(name for name in safe_tools if not self.owns(name))
        if unknown:
            raise SettingsError(
                f"MCP_SAFE_TOOLS names tools of no configured MCP server: {', '.join(unknown)}; "
                "write them as server__tool with a server of MCP_SERVERS."
            )
        self._safe_tools = frozenset(safe_tools)
        self._trust_read_only_hint = trust_read_only_hint
        self._connections: tuple[McpConnection, ...] = tuple(
            McpConnection(server, on_change=self._rebuild, call_timeout_s=call_timeout_s, **tuning) for server in self._servers
        )
        # Per server: the tools last seen and the specs built from them (schemas are checked once per change).
        self._built: dict[str, _Built] = {}
        self._specs: dict[str, ToolSpec] = {}
        self._read_only: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: Settings, **tuning: Any) -> McpTools:
        """The servers of MCP_SERVERS; a SettingsError when the `mcp` extra is missing or a setting is wrong."""
        try:
            import mcp  # noqa: F401
        except ImportError:
            raise SettingsError(
                f"MCP_SERVERS is set, but the mcp package is not installed: install the mcp extra ({EXTRA_HINT})."
            ) from None
        return cls(
            parse_servers(settings.mcp_servers),
            call_timeout_s=settings.mcp_call_timeout_s,
            safe_tools=settings.mcp_safe_tools,
            trust_read_only_hint=settings.mcp_trust_read_only_hint,
            **tuning,
        )

    async def start(self, *, wait_s: float = 0.0) -> None:
        """Connect to every server in the background; wait up to `wait_s` for each first attempt to end."""
        for connection in self._connections:
            connection.start()
        if wait_s > 0:
            await asyncio.gather(*(connection.wait_attempted(wait_s) for connection in self._connections))

    async def close(self) -> None:
        await asyncio.gather(*(connection.close() for connection in self._connections))

    # ----- core.tools.registry.ToolProvider -------------------------------------------------------

    def specs(self) -> Mapping[str, ToolSpec]:
        return self._specs

    def owns(self, name: str) -> bool:
        return name.startswith(self._prefixes)

    # ----- approvals and listing ------------------------------------------------------------------

    def approval_layers(self) -> list[PolicyLayer]:
        """MCP tools need approval (their specs say so) unless listed safe, or read-only by their
        server's word when the admin trusts that word; TOOL_APPROVAL_POLICY still comes first."""
        layers: list[PolicyLayer] = []
        if self._safe_tools:
            layers.append(StaticLayer(SAFE_TOOLS_SOURCE, {name: NEVER for name in self._safe_tools}))
        for server in self._servers:
            if server.trusts_read_only_hint(default=self._trust_read_only_hint):
                source = READ_ONLY_SOURCE if server.trust_read_only_hint is None else SERVER_TRUST_SOURCE.format(server=server.name)
                layers.append(PredicateLayer(source, functools.partial(self._trusted_hint, server.prefix)))
        return layers

    def _trusted_hint(self, prefix: str, name: str) -> bool:
        return name.startswith(prefix) and name in self._read_only

    def servers(self) -> list[ServerStatus]:
        return [
            ServerStatus(
                config=connection.config,
                state=connection.state,
                error=connection.error,
                tools=tuple((tool_name(connection.name, tool.name), tool) for tool in connection.tools),
            )
            for connection in self._connections
        ]

    # ----- specs ----------------------------------------------------------------------------------

    def _rebuild(self) -> None:
        """Called by a connection whose tools changed; the new mapping replaces the old one whole."""
        specs: dict[str, ToolSpec] = {}
        read_only: set[str] = set()
        for connection in self._connections:
            tools = connection.tools
            seen = self._built.get(connection.name)
            built = seen if seen is not None and seen.tools == tools else self._build(connection, tools)
            self._built[connection.name] = built
            specs.update(built.specs)
            read_only.update(built.read_only)
        self._specs, self._read_only = specs, frozenset(read_only)

    def _build(self, connection: McpConnection, tools: tuple[McpTool, ...]) -> _Built:
        specs: dict[str, ToolSpec] = {}
        read_only: set[str] = set()
        for tool in tools:
            name = tool_name(connection.name, tool.name)
            if name in specs:
                log.warning("MCP server %s: tool %r skipped: its name %s is taken", connection.name, tool.name, name)
                continue
            try:
                specs[name] = ToolSpec(
                    name=name,
                    description=(tool.description or f"{tool.name} (MCP server {connection.name})")[:MAX_DESCRIPTION_CHARS],
                    parameters=_parameters(tool.input_schema),
                    run=_runner(connection, tool.name),
                    requires_approval=True,
                    timeout_s=self._call_timeout_s,
                )
            except ValueError as error:
                log.warning("MCP server %s: tool %r skipped: %s", connection.name, tool.name, error)
                continue
            if tool.read_only_hint:
                read_only.add(name)
        return _Built(tools=tools, specs=specs, read_only=frozenset(read_only))


@dataclass(frozen=True, kw_only=True)
class _Built:
    """The specs made from one server's tool list, kept until the list changes."""

    tools: tuple[McpTool, ...]
    specs: dict[str, ToolSpec]
    read_only: frozenset[str]


def _parameters(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The tool's input schema as an OpenAI function's parameters: an object, with properties."""
    parameters = dict(schema)
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    return parameters


def _runner(connection: McpConnection, tool: str) -> ToolRun:
    async def run(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        return await connection.call(tool, arguments)

    return run
