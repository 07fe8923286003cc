"""The runtime connects MCP_SERVERS at start, hands their tools and trust layers to the engine, and closes
them at shutdown (the stdio server process ends with the bot)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bot.runtime import Runtime
from tests.emulators.openai_server import OpenAIEmulator
from tests.support.engine import test_settings as settings_for
from tests.support.mcp import FixtureServer, until


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers signal 0 until its parent reaps it; /proc says whether it is one.
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


async def test_mcp_servers_join_at_start_and_stop_with_the_bot(
    database_url: str, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    server = FixtureServer(transport="stdio", workdir=tmp_path)
    await server.start()
    settings = settings_for(
        openai_emulator.base_url, database_url=database_url, data_dir=tmp_path, http_port=0,
        mcp_servers=json.dumps({"test": server.entry()}), mcp_trust_read_only_hint=True,
    )
    runtime = Runtime(settings)
    try:
        engine = await runtime.open_engine()
        assert {"test__lookup", "test__append_note"} <= set(engine.registry.names())
        assert engine.tool_approvals.summary(engine.registry.get("test__lookup")).listing == "no approval"  # type: ignore[arg-type]
        assert engine.tool_approvals.summary(engine.registry.get("test__append_note")).listing == "needs approval"  # type: ignore[arg-type]
        pid = int(server.pid_file.read_text(encoding="utf-8"))
        assert alive(pid)
    finally:
        await runtime.stop()
    assert "test__lookup" not in engine.registry
    assert await until(lambda: not alive(pid))
