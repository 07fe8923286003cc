"""The embedded Postgres is stopped by the last clean shutdown even after a process using it was killed with -9."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.store.embedded_postgres import HANDLE_FILE, prune_dead_handles

STEP_TIMEOUT_S = 120
# Opens the embedded database of DATA_DIR (argv[1]); then either closes it cleanly or dies by kill -9 (argv[2]).
USER = """
import asyncio, os, signal, sys
from pathlib import Path
from core.store.db import Database

async def main() -> None:
    db = Database(url=None, data_dir=Path(sys.argv[1]))
    await db.open(migrate=False)
    async with db.connection() as conn:
        await conn.execute("SELECT 1")
    print(os.getpid(), flush=True)
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    await db.close()

asyncio.run(main())
"""


def _use(data_dir: Path, how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", USER, str(data_dir), how], capture_output=True, text=True,
                          timeout=STEP_TIMEOUT_S, cwd=data_dir.parent, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def _postmaster_pid(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@pytest.fixture
def data_dir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="relaybot-embedded-"))
    root.chmod(0o755)  # the server runs as its own system user when tests run as root
    try:
        yield root / "data"
    finally:
        # A server this test started and left running (the old behaviour) is stopped by its own pid.
        pid = _postmaster_pid(root / "data" / "pgdata")
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        shutil.rmtree(root, ignore_errors=True)


def test_a_clean_shutdown_after_a_kill_9_stops_the_embedded_server(data_dir: Path) -> None:
    killed = _use(data_dir, "kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    pgdata = data_dir / "pgdata"
    dead_pid = int(killed.stdout.split()[0])
    assert dead_pid in json.loads((pgdata / HANDLE_FILE).read_text())  # it never left
    server_pid = _postmaster_pid(pgdata)
    assert server_pid is not None

    clean = _use(data_dir, "close")
    assert clean.returncode == 0, clean.stderr
    assert _postmaster_pid(pgdata) is None, "the embedded server is still running after the last user left"
    assert json.loads((pgdata / HANDLE_FILE).read_text()) == []


def test_pruning_keeps_living_processes_and_drops_dead_ones(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid names no process now
    (tmp_path / HANDLE_FILE).write_text(json.dumps([os.getpid(), child.pid]))
    assert prune_dead_handles(tmp_path) == [child.pid]
    assert json.loads((tmp_path / HANDLE_FILE).read_text()) == [os.getpid()]
    assert prune_dead_handles(tmp_path / "missing") == []
