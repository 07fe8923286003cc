"""MCP_SERVERS parsing, the names MCP tools get, the registry's dynamic providers, and the missing-extra message."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings, SettingsError, load_settings
from core.tools import ToolContext, ToolRegistry, ToolSpec, builtin_registry
from core.tools.mcp.config import HttpTransport, StdioTransport, parse_servers, tool_name
from core.tools.mcp.tools import McpTools
from core.tools.registry import TOOL_NAME_PATTERN

ROOT = Path(__file__).resolve().parents[3]


async def noop(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    return ""


def spec(name: str) -> ToolSpec:
    return ToolSpec(name=name, description=name, parameters={"type": "object", "properties": {}}, run=noop)


def test_stdio_and_http_servers_are_parsed() -> None:
    stdio, http = parse_servers({
        "docs": {"command": "docs-mcp", "args": ["--ro"], "env": {"TOKEN": "t0ps3cret"}},
        "ops": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer abcdef123"}},
    })
    assert stdio.name == "docs" and stdio.transport == StdioTransport(command="docs-mcp", args=("--ro",), env={"TOKEN": "t0ps3cret"})
    assert http.transport == HttpTransport(url="https://mcp.example.com/mcp", headers={"Authorization": "Bearer abcdef123"})
    assert http.describe() == "HTTP: https://mcp.example.com/mcp" and stdio.describe() == "stdio: docs-mcp"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"a__b": {"command": "x"}}, "server name"),
        ({"bad name": {"command": "x"}}, "server name"),
        ({"s": {"command": "x", "url": "http://h/mcp"}}, "either a command"),
        ({"s": {}}, "either a command"),
        ({"s": {"command": ""}}, "non-empty"),
        ({"s": {"command": "x", "args": "--a"}}, "list of strings"),
        ({"s": {"command": "x", "env": {"A": 1}}}, "object of strings"),
        ({"s": {"url": "ftp://h/mcp"}}, "url of the server 's' is invalid"),
        ({"s": {"url": "http://h/mcp", "token": "x"}}, "unknown keys: token"),
        ({"s": "x"}, "JSON object"),
    ],
)
def test_malformed_servers_are_refused_with_a_reason(raw: Mapping[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_servers(raw)


def test_the_settings_check_servers_and_mask_their_secrets() -> None:
    settings = Settings(
        _env_file=None,
        mcp_servers='{"ops": {"url": "https://u:pw123456@mcp.example.com/mcp", "headers": {"Authorization": "Bearer abcdef123"}},'
        ' "docs": {"command": "docs-mcp", "env": {"TOKEN": "t0ps3cret"}}}',
        mcp_safe_tools='["ops__status"]',
    )
    assert settings.mcp_safe_tools == ("ops__status",)
    secrets = settings.secret_values()
    assert {"Bearer abcdef123", "t0ps3cret", "pw123456"} <= set(secrets)
    assert "abcdef123" not in repr(settings)
    with pytest.raises(SettingsError, match="MCP_SERVERS"):
        load_settings(_env_file=None, mcp_servers='{"ops": {"url": "nope"}}')
    with pytest.raises(SettingsError, match="MCP_SAFE_TOOLS"):
        load_settings(_env_file=None, mcp_safe_tools='{"ops__status": true}')


def test_tool_names_are_namespaced_valid_unique_and_stable() -> None:
    assert tool_name("docs", "search") == "docs__search"
    dotted, underscored = tool_name("docs", "files.read"), tool_name("docs", "files_read")
    assert dotted != underscored and dotted.startswith("docs__files_read_") and underscored == "docs__files_read"
    long_a, long_b = tool_name("docs", "x" * 80 + "a"), tool_name("docs", "x" * 80 + "b")
    assert long_a != long_b and len(long_a) == 64 and len(long_b) == 64
    assert tool_name("docs", "files.read") == dotted  # the same name on every listing
    for name in (dotted, long_a, tool_name("docs", "ünïcode tool!"), tool_name("d" * 24, "y" * 64), tool_name("docs", "")):
        assert TOOL_NAME_PATTERN.match(name), name


class Provider:
    def __init__(self) -> None:
        self.now: dict[str, ToolSpec] = {}

    def specs(self) -> Mapping[str, ToolSpec]:
        return self.now

    def owns(self, name: str) -> bool:
        return name.startswith("srv__")


def test_a_registry_provider_adds_and_removes_tools_as_they_come_and_go() -> None:
    provider = Provider()
    registry = builtin_registry()
    registry.add_provider(provider)
    copy = registry.copy()
    assert copy.names() == ("calculator", "current_time")
    assert copy.owns("srv__later") and not copy.owns("other")
    provider.now = {"srv__echo": spec("srv__echo")}
    assert copy.names() == ("calculator", "current_time", "srv__echo")
    assert "srv__echo" in copy and copy.get("srv__echo") is provider.now["srv__echo"] and len(copy) == 3
    assert copy.openai_tools(["srv__echo"])[0]["function"]["name"] == "srv__echo"
    provider.now = {}
    assert "srv__echo" not in copy and copy.get("srv__echo") is None
    with pytest.raises(ValueError, match="already registered"):
        copy.register(spec("srv__mine"))  # the provider's namespace is its own
    copy.register(spec("extra"))
    assert "extra" not in registry  # the copy is a copy


def test_safe_tools_must_belong_to_a_configured_server() -> None:
    settings = Settings(_env_file=None, mcp_servers='{"docs": {"command": "x"}}', mcp_safe_tools='["doc__search"]')
    with pytest.raises(SettingsError, match="doc__search"):
        McpTools.from_settings(settings)


def test_a_missing_mcp_extra_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # what `import mcp` meets without the extra
    settings = Settings(_env_file=None, mcp_servers='{"docs": {"command": "x"}}')
    with pytest.raises(SettingsError, match=r"relaybot\[mcp\]"):
        McpTools.from_settings(settings)


def test_the_bot_imports_without_the_mcp_extra() -> None:
    """Only MCP_SERVERS brings the SDK in: every other module imports with it absent."""
    code = (
        "import sys; sys.modules['mcp'] = None\n"
        "import bot.runtime, bot.tools_cli, core.engine, core.tools.mcp.tools\n"
        "print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
