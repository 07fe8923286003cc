"""The CLI as a user runs it: bad settings exit 2 with the variable's name and no secret; migrate then doctor work."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Iterator

import pytest

from tests.emulators.openai_server import OpenAIEmulator
from tests.support.relaybot_process import reachable_workdir, run_relaybot as _relaybot

REPO = Path(__file__).resolve().parents[2]


def _clean_env(**values: str) -> dict[str, str]:
    keep = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE", "TMPDIR")}
    keep.update(PYTHONPATH=str(REPO), **values)
    return keep


@pytest.fixture
def workdir() -> Iterator[Path]:
    with reachable_workdir("relaybot-cli-") as path:
        yield path


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


MALFORMED_DATABASE_URL = "postgresql+psycopg://app:pw-cli-SECRET@127.0.0.1:5432/app"
EVERY_COMMAND = (("run",), ("migrate",), ("doctor",), ("chat",), ("sources", "list"), ("ingest", "notes.md"))


async def test_malformed_database_url_is_one_sentence_on_every_command(workdir: Path) -> None:
    env = _clean_env(DATABASE_URL=MALFORMED_DATABASE_URL, DATA_DIR=str(workdir / "data"), EMBEDDING_PROVIDER="none")
    results = await asyncio.gather(*(_relaybot(*command, env=env, cwd=workdir) for command in EVERY_COMMAND))
    for command, (code, stdout, stderr) in zip(EVERY_COMMAND, results):
        assert code == 2, (command, stdout, stderr)
        assert stdout == "" and stderr.count("\n") == 1, (command, stderr)
        assert stderr.startswith("relaybot: The setting DATABASE_URL is invalid (its scheme is postgresql+psycopg://")
        assert "SECRET" not in stderr and "Traceback" not in stderr


async def test_migrate_with_a_value_that_is_not_a_url_exits_2(workdir: Path) -> None:
    code, stdout, stderr = await _relaybot("migrate", env=_clean_env(DATABASE_URL="not-a-url"), cwd=workdir)
    assert (code, stdout) == (2, "")
    assert stderr == (
        "relaybot: The setting DATABASE_URL is invalid (it is not a URL); "
        "set it to a postgresql:// URL, or leave it unset to use the embedded database.\n"
    )


async def test_unreachable_database_is_one_sentence_without_the_password(workdir: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = _clean_env(
        DATABASE_URL=f"postgresql://app:pw-cli-SECRET@127.0.0.1:{port}/app?sslpassword=ssl-cli-SECRET",
        DATA_DIR=str(workdir / "data"), EMBEDDING_PROVIDER="none", HTTP_PORT="0",
    )
    commands = (("run",), ("migrate",), ("sources", "list"))
    results = await asyncio.gather(*(_relaybot(*command, env=env, cwd=workdir) for command in commands))
    for command, (code, stdout, stderr) in zip(commands, results):
        assert code == 1, (command, stdout, stderr)
        sentence = [line for line in stderr.splitlines() if line.startswith("relaybot: ")]
        assert sentence == [
            f"relaybot: Cannot connect to Postgres at postgresql://***@127.0.0.1:{port}/app?sslpassword=*** "
            f'(connection to server at "127.0.0.1", port {port} failed: Connection refused '
            "Is the server running on that host and accepting TCP/IP connections?); check DATABASE_URL."
        ], (command, stderr)
        assert "SECRET" not in stdout + stderr and "Traceback" not in stdout + stderr
