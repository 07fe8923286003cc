"""The CLI as a user runs it: bad settings exit 2 with the variable's name; migrate then doctor work."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from tests.emulators.openai_server import OpenAIEmulator

REPO = Path(__file__).resolve().parents[2]


def _clean_env(**values: str) -> dict[str, str]:
    keep = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE", "TMPDIR")}
    keep.update(PYTHONPATH=str(REPO), **values)
    return keep


async def _relaybot(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    return process.returncode or 0, stdout.decode(), stderr.decode()


@pytest.fixture
def workdir() -> Iterator[Path]:
    # The embedded server runs as its own system user when tests run as root, so the folder must be reachable.
    path = Path(tempfile.mkdtemp(prefix="relaybot-cli-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize(
    ("variable", "value"),
    [("HTTP_PORT", "not-a-port"), ("LLM_IDLE_TIMEOUT_S", "-3"), ("AGENT_TYPE", "psychic"), ("LLM_MODEL_OVERRIDES", "{oops")],
)
async def test_bad_setting_exits_2_naming_the_variable(variable: str, value: str, workdir: Path) -> None:
    code, stdout, stderr = await _relaybot("doctor", env=_clean_env(**{variable: value}), cwd=workdir)
    assert code == 2
    assert variable in stderr
    assert "Traceback" not in stderr + stdout


async def test_migrate_then_doctor_on_embedded_database(openai_emulator: OpenAIEmulator, workdir: Path) -> None:
    env = _clean_env(LLM_BASE_URL=openai_emulator.base_url, DATA_DIR=str(workdir / "data"))
    code, stdout, stderr = await _relaybot("migrate", env=env, cwd=workdir)
    assert code == 0, stderr
    assert "embedded Postgres" in stdout and "applied" in stdout
    code, stdout, stderr = await _relaybot("doctor", env=env, cwd=workdir)
    assert code == 0, stdout + stderr
    lines = dict(line.split(":", 1) for line in stdout.splitlines() if ":" in line)
    assert lines["database"].strip().startswith("ok")
    assert lines["llm"].strip().startswith("ok")
    assert "not configured" in lines["slack"]


async def test_slack_http_mode_without_signing_secret_is_a_sentence(openai_emulator: OpenAIEmulator, workdir: Path) -> None:
    env = _clean_env(
        LLM_BASE_URL=openai_emulator.base_url, DATA_DIR=str(workdir / "data"), EMBEDDING_PROVIDER="none",
        SLACK_BOT_TOKEN="xoxb-test", HTTP_PORT="0",
    )
    code, stdout, stderr = await _relaybot("run", env=env, cwd=workdir)
    assert code == 2
    assert "SLACK_SIGNING_SECRET" in stderr
    assert "Traceback" not in stderr + stdout
