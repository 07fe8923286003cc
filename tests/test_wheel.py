"""The built wheel works outside the checkout: installed into a fresh virtualenv, `relaybot migrate` and `doctor` run."""

from __future__ import annotations

import asyncio
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.emulators.openai_server import OpenAIEmulator

REPO = Path(__file__).resolve().parents[1]
# What the wheel is built from; copying it keeps the build's egg-info and build/ out of the checkout.
SOURCES = ("pyproject.toml", "README.md", "bot", "core", "adapters")
STEP_TIMEOUT_S = 120


def _quiet_copy(source: Path, target: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    if source.is_dir():
        shutil.copytree(source, target, ignore=ignore)
    else:
        shutil.copy2(source, target)


def _step(*command: str | Path, cwd: Path) -> None:
    result = subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=STEP_TIMEOUT_S
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"


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


def test_the_wheel_carries_the_schema_and_no_tests(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert any(name.startswith("core/store/schema/") and name.endswith(".sql") for name in names)
    assert "bot/__main__.py" in names and "adapters/slack/adapter.py" in names
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
        "import sys, bot, core, adapters; print(bot.__file__, core.__file__, adapters.__file__, *sys.path, sep='\\n')",
        cwd=tmp_path, env=env,
    )
    assert code == 0, err
    modules, search_path = out.splitlines()[:3], out.splitlines()[3:]
    assert all(Path(module).is_relative_to(venv) for module in modules), modules
    assert not any(entry and Path(entry).resolve() == REPO for entry in search_path), search_path

    # Every migration of the checkout, read from the installed package (a wheel without them applies none).
    migrations = len(list((REPO / "core" / "store" / "schema").glob("*.sql")))
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
