"""`relaybot run` as real child processes: started with an environment, probed on /healthz, stopped or killed."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from pathlib import Path

import aiohttp

from .postgres import free_port

REPO = Path(__file__).resolve().parents[2]
READY_LIMIT_S = 60.0
# SHUTDOWN_GRACE_S (10 s) plus closing down; an orchestrator would have killed it long before.
STOP_LIMIT_S = 40.0
PROBE_TIMEOUT_S = 2.0
PASSED_ENV = ("PATH", "HOME", "LANG", "TMPDIR")
TRACEBACK = "Traceback (most recent call last)"
RUNNING_LINE = "relaybot is running"  # bot/runtime.py's serve(), once every adapter has started


class BotProcess:
    """One `python -m bot run`; its output goes to a log file the suite reads afterwards."""

    def __init__(self, name: str, *, env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.port = free_port()
        self.log_path = log_dir / f"{name}.log"
        self._env = {key: value for key, value in os.environ.items() if key in PASSED_ENV}
        self._env.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", HTTP_PORT=str(self.port), **env)
        self._process: asyncio.subprocess.Process | None = None
        self.starts = 0
        self.exit_codes: list[int] = []

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def start(self) -> None:
        """Starts the process and waits for its health check (bounded)."""
        log = self.log_path.open("ab")
        log.write(f"==== start {self.starts + 1} at {time.strftime('%H:%M:%S')} ====\n".encode())
        log.flush()
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", env=self._env, cwd=str(self.log_path.parent),
            stdout=log, stderr=asyncio.subprocess.STDOUT,
        )
        log.close()
        self.starts += 1
        deadline = time.monotonic() + READY_LIMIT_S
        while time.monotonic() < deadline:
            if self._process.returncode is not None:
                raise RuntimeError(f"{self.name} exited with {self._process.returncode} at start:\n{self.log_tail()}")
            # /healthz answers before the platforms are connected; the runtime says when all of it is up.
            if self.log_text().count(RUNNING_LINE) >= self.starts and await self.healthy():
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.name} did not come up within {READY_LIMIT_S:g} s:\n{self.log_tail()}")

    async def healthy(self) -> bool:
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{self.port}/healthz",
                                       timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)) as response:
                    return response.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False

    async def terminate(self, *, wait: bool = True) -> int | None:
        """SIGTERM, as a rolling deploy does; with wait, until it exits (killed past the limit)."""
        if not self.running:
            return None
        assert self._process is not None
        self._process.send_signal(signal.SIGTERM)
        return await self.wait_exit() if wait else None

    async def wait_exit(self) -> int:
        assert self._process is not None
        try:
            code = await asyncio.wait_for(self._process.wait(), STOP_LIMIT_S)
        except asyncio.TimeoutError:
            self._process.kill()
            code = await self._process.wait()
        self.exit_codes.append(code)
        return code

    async def kill(self) -> None:
        """SIGKILL: a crash, nothing cleaned up."""
        if self.running:
            assert self._process is not None
            self._process.kill()
            self.exit_codes.append(await self._process.wait())

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def tracebacks(self) -> int:
        return self.log_text().count(TRACEBACK)

    def log_lines(self, pattern: str) -> list[str]:
        found = re.compile(pattern)
        return [line for line in self.log_text().splitlines() if found.search(line)]
