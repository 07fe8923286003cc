"""MCP_SERVERS as typed entries (a stdio command or a streamable HTTP URL), and the `server__tool` names of their tools.

A tool's name is cut and cleaned to what the model API accepts, staying unique and stable.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

SEPARATOR = "__"
MAX_TOOL_NAME = 64  # core.tools.registry.TOOL_NAME_PATTERN
# Server names are keys an admin picks; they become prefixes, so they must leave room for the tool's name
# and never contain the separator (a name like a__b would make `a__b__c` ambiguous).
SERVER_NAME = re.compile(r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$")
MAX_SERVER_NAME = 24
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")
HASH_CHARS = 6
# An entry's own say over its read-only hints (true or false); absent, MCP_TRUST_READ_ONLY_HINT decides.
TRUST_KEY = "trust_read_only_hint"


@dataclass(frozen=True, kw_only=True)
class StdioTransport:
    """A server the bot starts as a subprocess and talks to over its stdin and stdout."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None


@dataclass(frozen=True, kw_only=True)
class HttpTransport:
    """A server reached over MCP's streamable HTTP transport."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class McpServerConfig:
    """One entry of MCP_SERVERS."""

    name: str
    transport: StdioTransport | HttpTransport
    # Whether this server's read-only hints let its tools run without approval; None: MCP_TRUST_READ_ONLY_HINT says.
    trust_read_only_hint: bool | None = None

    def trusts_read_only_hint(self, *, default: bool) -> bool:
        return default if self.trust_read_only_hint is None else self.trust_read_only_hint

    @property
    def prefix(self) -> str:
        return self.name + SEPARATOR

    def describe(self) -> str:
        """Where the server is, for log lines: the command or the URL, never an env or header value."""
        if isinstance(self.transport, StdioTransport):
            return f"stdio: {self.transport.command}"
        from core.redact import redact_url

        return f"HTTP: {redact_url(self.transport.url)}"


def parse_servers(raw: Mapping[str, Any]) -> tuple[McpServerConfig, ...]:
    """MCP_SERVERS as typed entries; a ValueError names the server and what is wrong (never a value it holds)."""
    return tuple(_parse_server(str(name), entry) for name, entry in raw.items())


def _parse_server(name: str, entry: Any) -> McpServerConfig:
    if not SERVER_NAME.match(name) or len(name) > MAX_SERVER_NAME:
        raise ValueError(
            f"the server name {name!r} must be 1 to {MAX_SERVER_NAME} letters, digits, '-' or single '_'"
        )
    if not isinstance(entry, Mapping):
        raise ValueError(f"the server {name!r} must be a JSON object")
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise ValueError(f"the server {name!r} needs either a command (stdio) or a url (streamable HTTP)")
    trust = entry.get(TRUST_KEY)
    if trust is not None and not isinstance(trust, bool):
        raise ValueError(f"the {TRUST_KEY} of the server {name!r} must be true or false")
    if has_command:
        _only(name, entry, {"command", "args", "env", "cwd", TRUST_KEY})
        command = entry["command"]
        if not isinstance(command, str) or not command.strip():
            raise ValueError(f"the command of the server {name!r} must be a non-empty string")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
            raise ValueError(f"the args of the server {name!r} must be a list of strings")
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ValueError(f"the cwd of the server {name!r} must be a string")
        return McpServerConfig(
            name=name,
            transport=StdioTransport(command=command, args=tuple(args), env=_strings(name, entry, "env"), cwd=cwd),
            trust_read_only_hint=trust,
        )
    _only(name, entry, {"url", "headers", TRUST_KEY})
    url = entry["url"]
    if not isinstance(url, str):
        raise ValueError(f"the url of the server {name!r} must be a string")
    problem = _url_problem(url.strip())
    if problem:
        raise ValueError(f"the url of the server {name!r} is invalid: {problem}")
    return McpServerConfig(
        name=name, transport=HttpTransport(url=url.strip(), headers=_strings(name, entry, "headers")), trust_read_only_hint=trust,
    )


def _url_problem(url: str) -> str:
    """Why `url` is no http(s) URL with a host, or "" (core.config cannot be imported here: it imports us)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or "://" not in url:
        return "it is not an http:// or https:// URL"
    try:
        parts.port  # reading it is what checks it
    except ValueError:
        return "its port is not a number between 0 and 65535"
    return "" if parts.hostname else "it has no host name"


def _only(name: str, entry: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(entry) - allowed)
    if extra:
        raise ValueError(f"the server {name!r} has unknown keys: {', '.join(extra)} (allowed: {', '.join(sorted(allowed))})")


def _strings(name: str, entry: Mapping[str, Any], key: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"the {key} of the server {name!r} must be a JSON object of strings")
    return dict(value)


def tool_name(server: str, tool: str) -> str:
    """The registry name of a server's tool: `server__tool`, valid for the model API.

    A tool name that must be cleaned or cut gets a short hash of the original, so two tools never
    share a name and a name stays the same across reconnects (a paused run may still hold it)."""
    prefix = server + SEPARATOR
    cleaned = _NOT_ALLOWED.sub("_", tool)
    if cleaned == tool and tool and len(prefix) + len(tool) <= MAX_TOOL_NAME:
        return prefix + tool
    digest = hashlib.sha256(tool.encode("utf-8")).hexdigest()[:HASH_CHARS]
    room = MAX_TOOL_NAME - len(prefix) - 1 - HASH_CHARS
    return f"{prefix}{cleaned[:room]}_{digest}" if cleaned[:room] else f"{prefix}{digest}"
