"""`make image-test`: build the Dockerfile with podman from wheels made here, run it, and check what it promises.

The wheels (the project's and all its dependencies') are built on this host with its own pip set-up and handed
to the build as the `wheels` context, so the build itself runs with no network; the base is a Debian bookworm
with Python 3.11 made here with mmdebstrap (podman_host.py). Exits 0 with one "skipped:" line when the host
cannot build or run images, 1 when the image is wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.image.external_db import start_postgres
from tests.image.podman_host import Podman, Skip, base_image, ensure_tools, podman

REPO = Path(__file__).resolve().parents[2]
# What the wheel is made of (the same list as the .dockerignore lets in).
SOURCES = ("pyproject.toml", "README.md", "bot", "core", "adapters", "migrations")
IMAGE = "localhost/relaybot:image-test"
EXTRAS = "local"
UID = "10001"
WHEELS_TIMEOUT_S = 300
BUILD_TIMEOUT_S = 600
STEP_TIMEOUT_S = 120
STARTED_WITHIN_S = 120
STOPPED_WITHIN_S = 30
SOURCE_NAME = "image-check"


class Failed(Exception):
    """The image does not do what the Dockerfile promises."""


def build_wheels(work: Path) -> Path:
    """Every wheel the image installs, built from a copy of the sources (no egg-info or build/ in the checkout)."""
    source = work / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, source / name)
    wheels = work / "wheels"
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels),
               "-c", str(REPO / "constraints.txt"), f"{source}[{EXTRAS}]"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=WHEELS_TIMEOUT_S)
    if result.returncode != 0:
        raise Failed(f"pip wheel failed:\n{result.stdout}\n{result.stderr}")
    if any(wheels.glob("torch-*.whl")):
        raise Failed("the image's wheels include torch")
    return wheels


def build_image(pod: Podman, *, base: str, wheels: Path) -> None:
    before = pod("image", "inspect", "--format", "{{.Id}}", IMAGE, timeout=60, check=False).stdout.strip()
    # --network none: the build must need nothing but the wheels context. --format docker keeps HEALTHCHECK.
    # --layers=false: each run's wheels differ (the project's is new), so cached layers would only pile up.
    pod("build", "--quiet", "--layers=false", "--format", "docker", "--network", "none", *pod.ulimits,
        "--build-arg", f"BASE_IMAGE={base}", "--build-arg", f"EXTRAS={EXTRAS}",
        "--build-context", f"wheels={wheels}", "-t", IMAGE, "-f", str(REPO / "Dockerfile"), str(REPO),
        timeout=BUILD_TIMEOUT_S)
    after = pod("image", "inspect", "--format", "{{.Id}}", IMAGE, timeout=60).stdout.strip()
    if before and before != after:  # the last run's image, now untagged: ~630 MB a run would otherwise pile up
        pod("rmi", before, timeout=60, check=False)


def check_config(pod: Podman) -> None:
    """The image's own metadata: user, volume, entrypoint, healthcheck, HTTP_HOST."""
    image = json.loads(pod("image", "inspect", IMAGE, timeout=60).stdout)[0]
    config = image.get("Config") or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or [])
    health = (image.get("Healthcheck") or {}).get("Test") or []
    problems = [
        f"user is {config.get('User')!r}" if config.get("User") != "relaybot" else "",
        f"volumes are {config.get('Volumes')}" if "/data" not in (config.get("Volumes") or {}) else "",
        f"entrypoint is {config.get('Entrypoint')} {config.get('Cmd')}"
        if (config.get("Entrypoint") or []) + (config.get("Cmd") or []) != ["relaybot", "run"] else "",
        f"healthcheck is {health}" if "/healthz" not in " ".join(health) else "",
        f"HTTP_HOST is {env.get('HTTP_HOST')!r}" if env.get("HTTP_HOST") != "0.0.0.0" else "",
        f"DATA_DIR is {env.get('DATA_DIR')!r}" if env.get("DATA_DIR") != "/data" else "",
    ]
    if any(problems):
        raise Failed("image config: " + "; ".join(problem for problem in problems if problem))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_healthz(pod: Podman, name: str, port: int) -> None:
    deadline = time.monotonic() + STARTED_WITHIN_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        state = pod("inspect", "--format", "{{.State.Status}}", name, timeout=30).stdout.strip()
        if state not in ("created", "running"):
            raise Failed(f"the container {state} before /healthz answered:\n{logs(pod, name)}")
        time.sleep(1)
    raise Failed(f"/healthz did not answer within {STARTED_WITHIN_S} s:\n{logs(pod, name)}")


def wait_for_healthy(pod: Podman, name: str) -> str:
    """Run the image's HEALTHCHECK until it passes (podman schedules it with systemd timers, absent here) and
    return the health status podman then records."""
    deadline = time.monotonic() + STARTED_WITHIN_S
    while True:
        result = pod("healthcheck", "run", name, timeout=60, check=False)
        if result.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    status = pod("inspect", "--format", "{{.State.Health.Status}}", name, timeout=30).stdout.strip()
    if status != "healthy":
        raise Failed(f"health status is {status!r} ({result.stdout.strip()} {result.stderr.strip()}):\n{logs(pod, name)}")
    return status


def logs(pod: Podman, name: str, *, tail: int = 40) -> str:
    result = pod("logs", "--tail", str(tail), name, timeout=30, check=False)
    return (result.stdout + result.stderr).strip()


def exec_in(pod: Podman, name: str, *command: str) -> str:
    result = pod("exec", name, *command, timeout=STEP_TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise Failed(f"`{' '.join(command)}` in the container failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.stdout


def check_running(pod: Podman, name: str) -> None:
    """Inside the running container: every process is relaybot's user, no PyTorch, local embeddings work."""
    processes = pod("top", name, "user", "comm", timeout=30).stdout.split("\n")[1:]
    users = {line.split()[0] for line in processes if line.strip()}
    commands = {line.split()[1] for line in processes if len(line.split()) > 1}
    if users - {"relaybot", UID}:
        raise Failed(f"processes run as {sorted(users)}:\n" + "\n".join(processes))
    if "postgres" not in commands:
        raise Failed("no embedded postgres process in the container:\n" + "\n".join(processes))
    found = exec_in(pod, name, "python3", "-c",
                    "import importlib.util as u; print(u.find_spec('torch') is None, u.find_spec('onnxruntime') is not None)")
    if found.split() != ["True", "True"]:
        raise Failed(f"torch absent, onnxruntime present: {found.strip()}")
    # Ingest embeds with the lean local model and writes into the embedded database on the volume.
    exec_in(pod, name, "sh", "-c", "mkdir -p /tmp/docs && echo 'The relay opens at nine.' > /tmp/docs/hours.md")
    exec_in(pod, name, "relaybot", "ingest", "--source", SOURCE_NAME, "/tmp/docs")


def stop(pod: Podman, name: str) -> None:
    """SIGTERM ends relaybot run cleanly (exit 0), before podman would resort to SIGKILL."""
    pod("stop", "--time", str(STOPPED_WITHIN_S), name, timeout=STOPPED_WITHIN_S + 30)
    code = pod("inspect", "--format", "{{.State.ExitCode}}", name, timeout=30).stdout.strip()
    if code != "0":
        raise Failed(f"relaybot run exited {code} on SIGTERM:\n{logs(pod, name)}")


def check_data_kept(pod: Podman, volume: str) -> None:
    """A new container on the same volume finds the embedded database with what was ingested."""
    result = pod("run", "--rm", *pod.ulimits, "-v", f"{volume}:/data", IMAGE, "sources", "list",
                 timeout=STEP_TIMEOUT_S, check=False)
    if result.returncode != 0 or SOURCE_NAME not in result.stdout:
        raise Failed(f"`relaybot sources list` on the same volume:\n{result.stdout}\n{result.stderr}")


def check_external_database(pod: Podman, *, db: str, app: str) -> None:
    """The image with DATABASE_URL, as compose.yaml runs it: no embedded server starts, and /readyz finds the
    database answering."""
    port = free_port()
    url = start_postgres(pod, image=IMAGE, name=db, publish=f"127.0.0.1:{port}:8080")
    pod("run", "--detach", "--name", app, *pod.ulimits, "--network", f"container:{db}", "-e", f"DATABASE_URL={url}",
        "-e", "EMBEDDING_PROVIDER=none", IMAGE, timeout=STEP_TIMEOUT_S)
    wait_for_healthz(pod, app, port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as response:
            ready = response.status
    except urllib.error.HTTPError as error:
        ready = error.code
    if ready != 200:
        raise Failed(f"/readyz answered {ready} with DATABASE_URL:\n{logs(pod, app)}")
    commands = pod("top", app, "comm", timeout=30).stdout.split()[1:]
    if "postgres" in commands or "database: Postgres at" not in logs(pod, app, tail=-1):
        raise Failed(f"with DATABASE_URL the container runs {commands}:\n{logs(pod, app)}")
    stop(pod, app)


def main() -> int:
    started = time.monotonic()
    name = volume = f"relaybot-image-check-{os.getpid()}"
    containers = (name, f"{name}-app", f"{name}-db")
    try:
        ensure_tools()
        pod = podman()
        base = base_image(pod)
        probe = pod("run", "--rm", *pod.ulimits, "--network", "none", base, "true", timeout=120, check=False)
        if probe.returncode != 0:
            reason = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            raise Skip(f"podman cannot start a container here: {reason}")
    except Skip as reason:
        print(f"image-test skipped: {reason}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="relaybot-image-"))
    try:
        wheels = build_wheels(work)
        print(f"wheels: {len(list(wheels.glob('*.whl')))} in {time.monotonic() - started:.0f} s", flush=True)
        build_image(pod, base=base, wheels=wheels)
        size_mb = int(pod("image", "inspect", "--format", "{{.Size}}", IMAGE, timeout=60).stdout) / 1e6
        print(f"built {IMAGE} on {base}: {size_mb:.0f} MB, {time.monotonic() - started:.0f} s", flush=True)
        check_config(pod)
        port = free_port()
        pod("volume", "create", volume, timeout=60)
        pod("run", "--detach", "--name", name, *pod.ulimits, "-p", f"127.0.0.1:{port}:8080", "-v", f"{volume}:/data",
            "-e", "EMBEDDING_PROVIDER=local", IMAGE, timeout=STEP_TIMEOUT_S)
        wait_for_healthz(pod, name, port)
        status = wait_for_healthy(pod, name)
        check_running(pod, name)
        stop(pod, name)
        check_data_kept(pod, volume)
        check_external_database(pod, db=containers[2], app=containers[1])
    except (Failed, RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"image-test FAILED: {error}")
        return 1
    finally:
        for container in containers:  # one at a time: the app container holds the db container's network
            pod("rm", "--force", "--volumes", "--time", "0", container, timeout=60, check=False)
        pod("volume", "rm", "--force", volume, timeout=60, check=False)
        shutil.rmtree(work, ignore_errors=True)
    print(f"image-test passed: /healthz answered on 127.0.0.1:{port}, health {status}, ran as relaybot with "
          f"the embedded database on a volume, no torch, and with DATABASE_URL; {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
