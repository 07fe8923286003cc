"""What the image test needs of this host: podman installed, flags its runtime accepts here, and a Debian base."""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Debian bookworm with its Python 3.11, venv included: the same Debian and Python as python:3.11-slim-bookworm,
# the Dockerfile's default base, made here because no image registry is reachable.
BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv")
BASE_ENV = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
)
# Documentation and translations are a third of a minimal Debian and nothing in the image reads them.
BASE_DPKG_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")
PACKAGES = {"podman": "podman", "mmdebstrap": "mmdebstrap", "runc": "runc"}
INSTALL_TIMEOUT_S = 600
BASE_TIMEOUT_S = 600
SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"


class Skip(Exception):
    """This host cannot run the image test; the message says why, in one line."""


@dataclass(frozen=True)
class Podman:
    """The podman command with the global flags and the per-container limits this host accepts."""

    command: tuple[str, ...]
    ulimits: tuple[str, ...]

    def __call__(self, *args: str, timeout: float, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([*self.command, *args], capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result


def _which(name: str) -> str | None:
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:{SBIN_PATH}")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def ensure_tools() -> None:
    """Install podman, mmdebstrap and runc from Debian where one is missing (as root, or with sudo -n)."""
    missing = [package for command, package in PACKAGES.items() if _which(command) is None]
    if not missing:
        return
    if _which("apt-get") is None:
        raise Skip(f"{', '.join(missing)} not installed and no apt-get to install them")
    prefix: list[str] = []
    if os.geteuid() != 0:
        if _which("sudo") is None or subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode != 0:
            raise Skip(f"{', '.join(missing)} not installed, and installing needs root or passwordless sudo")
        prefix = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"installing {' '.join(missing)} from Debian", flush=True)
    for step in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        result = subprocess.run(prefix + step, capture_output=True, text=True, env=env, timeout=INSTALL_TIMEOUT_S)
        if result.returncode != 0:
            raise Skip(f"`{' '.join(step)}` failed: {_last_line(result.stderr or result.stdout)}")


def podman() -> Podman:
    """podman with runc and limits this host's runtime accepts, checked by starting nothing but the runtime."""
    # runc, not Debian's default crun: crun refuses cgroups in hybrid mode (v1 controllers beside a v2 mount
    # that has one enabled, as on this workplace's machines); runc runs on v1, v2 and hybrid alike.
    command = (_which("podman") or "podman", "--runtime", _which("runc") or "runc")
    # podman asks for RLIMIT_NOFILE 1048576 and RLIMIT_NPROC 4194304 in every container; a host whose root
    # lacks CAP_SYS_RESOURCE cannot grant more than it has, and here runc's init was refused an RLIMIT_NPROC
    # above the kernel's pid_max. So the container gets this process's own limits, capped at pid_max.
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    if nproc == resource.RLIM_INFINITY or nproc > pid_max:
        nproc = pid_max
    ulimits = ("--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}")
    result = subprocess.run([*command, "info", "--format", "{{.Host.OCIRuntime.Name}}"], capture_output=True,
                            text=True, timeout=120)
    if result.returncode != 0:
        raise Skip(f"podman cannot start here: {_last_line(result.stderr)}")
    return Podman(command=command, ulimits=ulimits)


def cache_dir() -> Path:
    """Where the base's tarball is kept between runs: outside the repository, per user."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "relaybot-image"


def base_image(pod: Podman) -> str:
    """The local Debian bookworm + Python 3.11 base, made once with mmdebstrap and cached as a tarball."""
    recipe = [
        "mmdebstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
        *(f"--dpkgopt=path-exclude={pattern}" for pattern in BASE_DPKG_EXCLUDES),
        # This workplace's Debian mirror serves a dated snapshot whose Release files have expired.
        "--aptopt=Acquire::Check-Valid-Until \"false\"",
        BASE_SUITE,
    ]
    key = hashlib.sha256("\n".join([*recipe, *BASE_ENV]).encode()).hexdigest()[:12]
    tag = f"localhost/relaybot-base:{BASE_SUITE}-py311-{key}"
    if pod("image", "exists", tag, timeout=60, check=False).returncode == 0:
        return tag
    tarball = cache_dir() / f"base-{BASE_SUITE}-{key}.tar"
    if not tarball.exists():
        tarball.parent.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(".partial.tar")
        print(f"making the base with mmdebstrap into {tarball}", flush=True)
        result = subprocess.run([*recipe, str(partial)], capture_output=True, text=True, timeout=BASE_TIMEOUT_S)
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise Skip(f"mmdebstrap could not make the Debian base: {_last_line(result.stderr)}")
        partial.rename(tarball)
    changes = [part for variable in BASE_ENV for part in ("--change", f"ENV {variable}")]
    pod("import", "--quiet", *changes, "--change", 'CMD ["python3"]', str(tarball), tag, timeout=300)
    return tag
