"""Errors that say what to do: a missing ingest path is one sentence and no source; no library warning on every
command; a first doctor says its migrations in one line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

from tests.emulators.openai_server import OpenAIEmulator
from tests.support.relaybot_process import reachable_workdir, run_relaybot as _relaybot

REPO = Path(__file__).resolve().parents[2]


def _env(**values: str) -> dict[str, str]:
    # XDG_RUNTIME_DIR is left out on purpose: containers, cron and `su` run without it.
    keep = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    keep.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", EMBEDDING_PROVIDER="none", **values)
    return keep


@pytest.fixture
def workdir() -> Iterator[Path]:
    with reachable_workdir("relaybot-errors-") as path:
        yield path


async def test_ingest_of_a_missing_path_exits_2_with_one_sentence_and_leaves_no_source(
    database_url: str, tmp_path: Path
) -> None:
    code, stdout, stderr = await _relaybot("ingest", "./missing", env=_env(DATABASE_URL=database_url), cwd=tmp_path)
    assert (code, stdout) == (2, "")
    assert stderr == (
        f"relaybot: there is no file or folder at ./missing; check the path (a relative one is read from {tmp_path}).\n"
    )
    with psycopg.connect(database_url) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'sources'").fetchone()
        # Refused before the database was opened: not even migrated, so certainly no source row.
        assert tables == (0,)


async def test_an_existing_path_beside_a_missing_one_is_not_ingested_either(database_url: str, tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("Standup is at ten.\n")
    env = _env(DATABASE_URL=database_url)
    code, stdout, stderr = await _relaybot("ingest", "notes.md", "nope.md", "~/nope-either", env=env, cwd=tmp_path)
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert "at nope.md, ~/nope-either;" in stderr and "notes.md," not in stderr
    code, stdout, stderr = await _relaybot("sources", "list", env=env, cwd=tmp_path)
    assert code == 0 and stdout.startswith("No sources yet"), stdout + stderr


async def test_no_runtime_dir_warning_and_one_migration_line_on_a_first_doctor(
    openai_emulator: OpenAIEmulator, workdir: Path
) -> None:
    env = _env(LLM_BASE_URL=openai_emulator.base_url, DATA_DIR=str(workdir / "data"))
    assert "XDG_RUNTIME_DIR" not in env
    code, stdout, stderr = await _relaybot("--version", env=env, cwd=workdir)
    assert (code, stderr) == (0, "") and stdout.startswith("relaybot ")

    code, stdout, stderr = await _relaybot("doctor", env=env, cwd=workdir)
    assert code == 0, stdout + stderr
    # The embedded server is imported here (pgserver asks platformdirs for a runtime folder): still no warning.
    assert "RuntimeDirWarning" not in stdout + stderr and "XDG_RUNTIME_DIR" not in stdout + stderr
    assert "applied migration" not in stdout + stderr
    [database] = [line for line in stdout.splitlines() if line.startswith("database: ")]
    applied = len(list((REPO / "migrations").glob("[0-9]*.sql")))
    assert database.endswith(f", {applied} migrations applied ({applied} just now)")
    assert stderr == ""

    code, stdout, stderr = await _relaybot("doctor", env=env, cwd=workdir)
    assert code == 0 and stderr == "", stdout + stderr
    assert f", {applied} migrations applied" in stdout and "just now" not in stdout
