"""`python -m bot …` as a test's child process, run to its end (bounded), in a folder the embedded server can reach."""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


async def run_relaybot(*args: str, env: dict[str, str], cwd: Path, timeout_s: float = 120.0) -> tuple[int, str, str]:
    """Its exit code, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=timeout_s)
    return process.returncode or 0, stdout.decode(), stderr.decode()


@contextmanager
def reachable_workdir(prefix: str) -> Iterator[Path]:
    # The embedded server runs as its own system user when tests run as root, so the folder must be reachable.
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
