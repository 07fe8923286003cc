"""The built wheel works outside the checkout: installed into a fresh virtualenv, `relaybot migrate` and `doctor` run;
installed with the pip Python bundles, its dependencies read an HTML page."""

from __future__ import annotations

import asyncio
import base64
import ensurepip
import hashlib
import importlib.metadata
import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.emulators.openai_server import OpenAIEmulator

REPO = Path(__file__).resolve().parents[1]
# What the wheel is built from; copying it keeps the build's egg-info and build/ out of the checkout.
SOURCES = ("pyproject.toml", "README.md", "bot", "core", "adapters", "migrations")
STEP_TIMEOUT_S = 120
# Installing every dependency (about 240 MB of wheels) with the bundled pip on a busy 2-core machine.
INSTALL_TIMEOUT_S = 900


def _quiet_copy(source: Path, target: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    if source.is_dir():
        shutil.copytree(source, target, ignore=ignore)
    else:
        shutil.copy2(source, target)


def _step(*command: str | Path, cwd: Path, timeout: float = STEP_TIMEOUT_S, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built offline from a copy of the sources with the build tools of this environment."""
    root = tmp_path_factory.mktemp("wheel-build")
    source = root / "src"
    source.mkdir()
    for name in SOURCES:
        _quiet_copy(REPO / name, source / name)
    dist = root / "dist"
    _step(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
          "--wheel-dir", dist, source, cwd=root)
    (built,) = dist.glob("relaybot-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv outside the checkout with only the wheel installed; it sees this environment's
    dependencies through a .pth file (whose paths are appended to sys.path, their own .pth files unread,
    so the checkout's editable install stays invisible)."""
    root = tmp_path_factory.mktemp("wheel-venv") / "venv"
    _step(sys.executable, "-m", "venv", "--without-pip", root, cwd=root.parent)
    (target,) = root.glob("lib/python*/site-packages")
    (target / "relaybot-test-dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    # --ignore-installed: pip must not try to uninstall the editable relaybot it can see through the .pth file.
    _step(root / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
          "--quiet", wheel, cwd=root.parent)
    return root


def test_the_wheel_carries_the_migrations_and_no_tests(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "migrations/__init__.py" in names
    assert any(name.startswith("migrations/") and name.endswith(".sql") for name in names)
    assert "bot/__main__.py" in names and "adapters/slack/adapter.py" in names
    assert "adapters/slack/slack-app-manifest.yaml" in names  # "Add to Slack" reads its scopes from it
    assert not any(name.startswith("tests/") for name in names)


async def _run(*command: str | Path, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *(str(part) for part in command), cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=STEP_TIMEOUT_S)
    return process.returncode or 0, stdout.decode(), stderr.decode()


async def test_migrate_and_doctor_run_from_the_installed_wheel(
    venv: Path, database_url: str, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(
        HF_HUB_OFFLINE="1", DATABASE_URL=database_url, LLM_BASE_URL=openai_emulator.base_url,
        EMBEDDING_PROVIDER="none", DATA_DIR=str(tmp_path / "data"),
    )
    # No PYTHONPATH and a working directory outside the checkout: only the installed wheel provides relaybot.
    code, out, err = await _run(
        venv / "bin" / "python", "-c",
        "import sys, bot, core, adapters, migrations; "
        "print(bot.__file__, core.__file__, adapters.__file__, migrations.__file__, *sys.path, sep='\\n')",
        cwd=tmp_path, env=env,
    )
    assert code == 0, err
    modules, search_path = out.splitlines()[:4], out.splitlines()[4:]
    assert all(Path(module).is_relative_to(venv) for module in modules), modules
    assert not any(entry and Path(entry).resolve() == REPO for entry in search_path), search_path

    # Every migration of the checkout, read from the installed package (a wheel without them applies none).
    migrations = len(list((REPO / "migrations").glob("*.sql")))
    assert migrations > 0
    code, out, err = await _run(venv / "bin" / "relaybot", "migrate", cwd=tmp_path, env=env)
    assert code == 0, out + err
    assert f"applied {migrations} migration(s)" in out, out + err

    code, out, err = await _run(venv / "bin" / "relaybot", "doctor", cwd=tmp_path, env=env)
    lines = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    assert lines["database"].strip().startswith("ok — "), out + err
    assert f"{migrations} migrations applied" in lines["database"], out + err
    assert lines["llm"].strip().startswith("ok — "), out + err
    assert code == 0, out + err


async def test_several_workspaces_read_the_manifests_scopes_from_the_installed_wheel(
    venv: Path, tmp_path: Path
) -> None:
    import yaml

    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    code, out, err = await _run(
        venv / "bin" / "python", "-c",
        "from adapters.slack.oauth import MANIFEST, manifest_scopes; print(MANIFEST); print(*manifest_scopes())",
        cwd=tmp_path, env=env,
    )
    assert code == 0, err
    path, scopes = out.splitlines()
    # Read from the installed package (no checkout to fall back on), the same scopes as the repository's manifest.
    assert Path(path).is_relative_to(venv) and Path(path).is_file(), path
    manifest = yaml.safe_load((REPO / "slack-app-manifest.yaml").read_text(encoding="utf-8"))
    assert scopes.split() == manifest["oauth_config"]["scopes"]["bot"]


# --- the pip Python bundles, offline ---------------------------------------------------------------------

PAGE = (
    "<html><head><title>Rotation policy</title></head><body><nav>Home | Wiki | Search</nav><main><article>"
    "<h1>Rotating the staging password</h1>"
    + "".join(f"<p>Step {n}: the staging password is rotated monthly by the on-call engineer, who records it.</p>"
              for n in range(1, 8))
    + "</article></main><footer>Company footer</footer></body></html>"
)


def _requirements_of(metadata: str, extras: frozenset[str]) -> list[Requirement]:
    """The requirements a distribution's METADATA asks for with these extras (names compared normalised,
    as a current pip does: a superset of what an old pip picks, so every wheel it may want is offered)."""
    found = []
    for line in Parser().parsestr(metadata).get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        marker = requirement.marker
        if marker is None or any(marker.evaluate({"extra": extra}) for extra in (sorted(extras) or [""])):
            found.append(requirement)
    return found


def _wheel_from_installed(name: str, wheelhouse: Path) -> None:
    """A wheel of an installed distribution, made from its installed files (RECORD, the tags in WHEEL): the
    dependencies are already here, so the test needs no network and no package index."""
    dist = importlib.metadata.distribution(name)
    wheel_info = dist.read_text("WHEEL") or ""
    tags = [line.split("-") for line in re.findall(r"^Tag: (\S+)$", wheel_info, re.MULTILINE)]
    assert tags, f"{name} has no wheel tag"
    # The compressed tag set of the file name (py2.py3-none-any): each part's values, in order.
    tag = "-".join(".".join(dict.fromkeys(parts[i] for parts in tags)) for i in range(3))
    base = Path(str(dist.locate_file("")))
    files = [f for f in dist.files or () if not str(f).startswith("..") and "__pycache__" not in f.parts]
    info_dir = next(f.parts[0] for f in files if f.parts[0].endswith(".dist-info"))
    skipped = {f"{info_dir}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    target = wheelhouse / f"{re.sub(r'[-_.]+', '_', dist.metadata['Name'])}-{dist.version}-{tag}.whl"
    record = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as wheel_zip:
        for entry in files:
            path = str(entry).replace(os.sep, "/")
            if path in skipped or not (base / entry).is_file():
                continue
            data = (base / entry).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            wheel_zip.writestr(path, data)
            record.append(f"{path},sha256={digest},{len(data)}")
        record.append(f"{info_dir}/RECORD,,")
        wheel_zip.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")


def _wheelhouse_for(wheel: Path, wheelhouse: Path) -> None:
    """Wheels of everything the project's wheel needs, transitively, from this environment's installs."""
    with zipfile.ZipFile(wheel) as built:
        metadata = built.read(next(n for n in built.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    todo = [(requirement, frozenset(requirement.extras)) for requirement in _requirements_of(metadata, frozenset())]
    done: dict[str, frozenset[str]] = {}
    while todo:
        requirement, extras = todo.pop()
        key = canonicalize_name(requirement.name)
        extras = frozenset(canonicalize_name(extra) for extra in extras)
        if key in done and extras <= done[key]:
            continue
        first = key not in done
        done[key] = done.get(key, frozenset()) | extras
        dist = importlib.metadata.distribution(requirement.name)
        if first:
            _wheel_from_installed(requirement.name, wheelhouse)
        for needed in _requirements_of(dist.read_text("METADATA") or "", done[key]):
            todo.append((needed, frozenset(needed.extras)))


@pytest.fixture(scope="module")
def bundled_pip_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the pip Python bundles (never upgraded), the wheel installed with its
    dependencies from a local folder of wheels: what `pip install .` on a new machine resolves."""
    root = tmp_path_factory.mktemp("bundled-pip") / "venv"
    _step(sys.executable, "-m", "venv", root, cwd=root.parent)
    python = root / "bin" / "python"
    version = _step(python, "-m", "pip", "--version", cwd=root.parent)
    assert version.split()[1] == ensurepip.version(), version
    wheelhouse = root.parent / "wheelhouse"
    wheelhouse.mkdir()
    _wheelhouse_for(wheel, wheelhouse)
    # Only the folder: no pip.conf or PIP_* settings of this machine (its own mirrors and find-links).
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    # --no-compile: the same packages resolved and installed, without a .pyc written for all ~250 MB of them (what
    # the test imports is compiled as it is read).
    _step(python, "-m", "pip", "install", "--no-index", "--find-links", wheelhouse, "--quiet", "--no-compile",
          "--disable-pip-version-check", wheel, cwd=root.parent, timeout=INSTALL_TIMEOUT_S, env=env)
    return root


def test_installed_with_the_bundled_pip_the_wheel_reads_an_html_page(bundled_pip_venv: Path, tmp_path: Path) -> None:
    # lxml 6 calls its extra html-clean, justext asks lxml[html_clean]: Python 3.11's pip 23.2 does not match
    # the two, so only a direct requirement brings lxml_html_clean, without which every HTML read fails.
    script = (
        "import sys, core\n"
        "from core.retrieval.main_content import extract_main_content\n"
        "page = extract_main_content(sys.stdin.read())\n"
        "import lxml_html_clean\n"
        "print(core.__file__); print(page.title); print(page.text)\n"
    )
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    result = subprocess.run([bundled_pip_venv / "bin" / "python", "-c", script], input=PAGE, cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    module, title, *text = result.stdout.splitlines()
    assert Path(module).is_relative_to(bundled_pip_venv)
    assert title in ("Rotation policy", "Rotating the staging password")
    assert "rotated monthly by the on-call engineer" in "\n".join(text) and "Company footer" not in result.stdout
