"""`relaybot tools` lists built-in and MCP tools with whether each needs approval and why, and says which
MCP servers are down — run as the real command against the test MCP server."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from tests.support.mcp import FixtureServer
from tests.support.processes import free_port

REPO = Path(__file__).resolve().parents[2]


async def relaybot(*args: str, cwd: Path, **settings: str) -> tuple[int, str, str]:
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE", "TMPDIR")}
    env.update(PYTHONPATH=str(REPO), EMBEDDING_PROVIDER="none", **settings)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    return process.returncode or 0, stdout.decode(), stderr.decode()


def rows(stdout: str) -> dict[str, list[str]]:
    """tool → [from, approval, why], read from the table's fixed-width columns."""
    lines = stdout.splitlines()
    header = lines[0]
    starts = [header.index(name) for name in ("tool", "from", "approval", "why")]
    table: dict[str, list[str]] = {}
    for line in lines[1:]:
        if line.startswith("MCP server "):
            continue
        cells = [line[start:end].strip() for start, end in zip(starts, [*starts[1:], None])]
        table[cells[0]] = cells[1:]
    return table


async def test_built_in_and_mcp_tools_with_their_approval_and_reason(tmp_path: Path) -> None:
    server = FixtureServer(transport="stdio", workdir=tmp_path)
    await server.start()
    down = f"http://127.0.0.1:{free_port()}/mcp"
    code, stdout, stderr = await relaybot(
        "tools", "--wait", "20", cwd=tmp_path,
        MCP_SERVERS=json.dumps({"test": server.entry(), "gone": {"url": down}}),
        MCP_TRUST_READ_ONLY_HINT="true",
        MCP_SAFE_TOOLS='["test__slow"]',
        TOOL_APPROVAL_POLICY=json.dumps({"test__append_note": {"when": {"text": "/prod/"}}, "calculator": "always"}),
        TOOL_APPROVAL_OVERRIDES='{"create_reminder": false}',
    )
    assert code == 0, stderr
    table = rows(stdout)
    assert table["calculator"] == ["built-in", "needs approval", "always: TOOL_APPROVAL_POLICY"]
    assert table["current_time"] == ["built-in", "no approval", "tool default"]
    assert table["create_reminder"] == ["built-in", "no approval", "never: TOOL_APPROVAL_OVERRIDES"]
    assert table["test__lookup"] == ["MCP test", "no approval", "never: MCP read-only hint + MCP_TRUST_READ_ONLY_HINT"]
    assert table["test__append_note"] == ["MCP test", "depends on the arguments", "when text=/prod/: TOOL_APPROVAL_POLICY"]
    assert table["test__slow"] == ["MCP test", "no approval", "never: MCP_SAFE_TOOLS"]
    assert table["test__enable_extra"][:2] == ["MCP test", "needs approval"]
    assert "MCP server test (stdio: " in stdout and "connected, 4 tools." in stdout
    assert f"MCP server gone (HTTP: {down}): down (" in stdout and "its tools are not listed." in stdout


async def test_a_misspelt_tool_in_the_approval_settings_is_reported(tmp_path: Path) -> None:
    code, stdout, stderr = await relaybot("tools", cwd=tmp_path, TOOL_APPROVAL_POLICY='{"calculater": "always"}')
    assert code == 2
    assert "calculator" in rows(stdout)
    assert "TOOL_APPROVAL_POLICY: calculater" in stderr
