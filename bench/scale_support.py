"""bench/scale.py's fleet: N `relaybot run` processes started as plain processes, their CPU time, and the database
connections they hold."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import psycopg

from tests.support.processes import free_port

REPO = Path(__file__).resolve().parents[1]
READY_LIMIT_S = 90.0
STOP_LIMIT_S = 60.0
TRACEBACK = "Traceback (most recent call last)"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14 and 15 of stat)


@dataclass
class Member:
    """One `relaybot run` of the fleet."""

    process: asyncio.subprocess.Process
    port: int
    log_path: Path

    @property
    def events_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"


@dataclass
class Fleet:
    """N processes of the same settings, each with its own HTTP port and log file."""

    env: dict[str, str]
    log_dir: Path
    members: list[Member] = field(default_factory=list)

    async def start(self, count: int, *, own: Callable[[int], dict[str, str]] = lambda n: {}) -> None:
        """`count` processes; `own(n)`: settings of the n-th alone."""
        for n in range(count):
            port = free_port()
            log_path = self.log_dir / f"process-{n}.log"
            env = {**self.env, **own(n), "HTTP_PORT": str(port)}
            with log_path.open("wb") as log:
                process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "bot", "run", env=env, cwd=REPO, stdin=asyncio.subprocess.DEVNULL,
                    stdout=log, stderr=log,
                )
            self.members.append(Member(process=process, port=port, log_path=log_path))
        await asyncio.gather(*(self._ready(member) for member in self.members))

    async def _ready(self, member: Member) -> None:
        deadline = time.monotonic() + READY_LIMIT_S
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if member.process.returncode is not None:
                    raise RuntimeError(f"a process exited at start ({member.process.returncode}); see {member.log_path}")
                try:
                    async with session.get(f"http://127.0.0.1:{member.port}/readyz") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)
        raise RuntimeError(f"a process was not ready within {READY_LIMIT_S:g} s; see {member.log_path}")

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(member.process.pid) for member in self.members)

    async def stop(self) -> None:
        for member in self.members:
            if member.process.returncode is None:
                member.process.send_signal(signal.SIGTERM)
        for member in self.members:
            try:
                await asyncio.wait_for(member.process.wait(), STOP_LIMIT_S)
            except TimeoutError:
                member.process.kill()
                await member.process.wait()

    def tracebacks(self) -> list[str]:
        found = []
        for member in self.members:
            text = member.log_path.read_text(errors="replace") if member.log_path.exists() else ""
            found += [f"{member.log_path.name}: {TRACEBACK}{part[:1500]}" for part in text.split(TRACEBACK)[1:]]
        return found


class ConnectionSampler:
    """The most connections the fleet held on its database at once, sampled while it works."""

    def __init__(self, admin_url: str, database: str, *, every_s: float = 0.1) -> None:
        self.admin_url = admin_url
        self.database = database
        self.every_s = every_s
        self.most = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def _sample(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.admin_url, autocommit=True) as conn:
            while True:
                cursor = await conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                    (self.database,),
                )
                row = await cursor.fetchone()
                self.most = max(self.most, int(row[0]) if row else 0)
                await asyncio.sleep(self.every_s)

    async def stop(self) -> int:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        return self.most


async def fresh_database(admin_url: str, name: str) -> str:
    """A new empty database on the bench's server (each N starts from nothing, migrated by its processes)."""
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await conn.execute(f'CREATE DATABASE "{name}"')
    return urlsplit(admin_url)._replace(path=f"/{name}").geturl()
