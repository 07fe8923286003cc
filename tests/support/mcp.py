"""The test MCP server (tests/fixtures/mcp_server.py) over stdio or streamable HTTP, and a bounded wait for a condition."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.processes import free_port

SERVER_SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py"
POLL_LIMIT_S = 20.0
# Reconnects and health checks fast enough for tests; the behaviour is the same as with the defaults.
FAST = {"health_interval_s": 0.2, "backoff_s": (0.05, 0.3), "request_timeout_s": 5.0}


async def until(predicate: Callable[[], bool], *, limit_s: float = POLL_LIMIT_S) -> bool:
    """Poll a condition that other tasks make true, up to `limit_s`."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


@dataclass
class FixtureServer:
    """One test MCP server: its MCP_SERVERS entry, the file its write tool appends to, and how to stop it.

    Over stdio the bot starts the process itself (and starts it again when it reconnects), so "down"
    means killing it while a flag file makes every new start exit at once. Over HTTP the test runs it."""

    transport: str
    workdir: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log(self) -> Path:
        return self.workdir / "notes.log"

    @property
    def pid_file(self) -> Path:
        return self.workdir / "server.pid"

    @property
    def refuse_flag(self) -> Path:
        return self.workdir / "down"

    def notes(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines() if self.log.exists() else []

    def entry(self) -> dict[str, Any]:
        if self.transport == "stdio":
            return {
                "command": sys.executable,
                "args": [str(SERVER_SCRIPT), "stdio", "--log", str(self.log), "--pid-file", str(self.pid_file),
                         "--refuse-if", str(self.refuse_flag)],
            }
        return {"url": f"http://127.0.0.1:{self.port}/mcp", "headers": {"X-Test": "relaybot"}}

    async def start(self) -> None:
        """Over HTTP: run the server and wait until it takes connections. Over stdio: let new starts succeed."""
        if self.transport == "stdio":
            self.refuse_flag.unlink(missing_ok=True)
            return
        self.port = self.port or free_port()
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT), "http", "--port", str(self.port), "--log", str(self.log)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        assert await until(self._listening), "the test MCP server did not start listening"

    def kill(self) -> None:
        """The server dies without a goodbye (SIGKILL); over stdio, new starts fail until `start`."""
        if self.transport == "stdio":
            self.refuse_flag.touch()
            os.kill(int(self.pid_file.read_text(encoding="utf-8")), signal.SIGKILL)
            return
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
            self.process = None

    def _listening(self) -> bool:
        import socket

        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
        except OSError:
            return False
        return True
