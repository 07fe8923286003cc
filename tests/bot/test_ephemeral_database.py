"""`relaybot run` on a throw-away-disk host (DYNO set) refuses the embedded database unless forced."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import pytest

from bot import commands
from core.config import Settings

REPO = Path(__file__).resolve().parents[2]


async def _started(settings: Settings) -> int:
    return 0


@pytest.fixture
def serve_calls(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """Stands in for the runtime, recording whether `run` got as far as starting it."""
    import bot.runtime

    calls: list[Settings] = []

    async def serve(settings: Settings) -> int:
        calls.append(settings)
        return 0

    monkeypatch.setattr(bot.runtime, "serve", serve)
    return calls


async def test_dyno_without_database_url_refuses_with_one_sentence(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], serve_calls: list[Settings]
) -> None:
    monkeypatch.setenv("DYNO", "web.1")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("ALLOW_EPHEMERAL_DATABASE", raising=False)
    code = await commands.run(Settings(_env_file=None), argparse.Namespace())
    assert code == 2 and serve_calls == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaybot: DYNO is set")
    assert "DATABASE_URL" in err and "ALLOW_EPHEMERAL_DATABASE=true" in err


@pytest.mark.parametrize(
    "settings",
    [
        Settings(_env_file=None, database_url="postgresql://app@db.internal:5432/app"),
        Settings(_env_file=None, allow_ephemeral_database=True),
    ],
    ids=["database_url", "forced"],
)
async def test_dyno_starts_with_a_database_url_or_when_forced(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, serve_calls: list[Settings]
) -> None:
    monkeypatch.setenv("DYNO", "web.1")
    assert await commands.run(settings, argparse.Namespace()) == 0
    assert serve_calls == [settings]


async def test_an_ordinary_host_starts_on_the_embedded_database(
    monkeypatch: pytest.MonkeyPatch, serve_calls: list[Settings]
) -> None:
    for variable, _ in commands.EPHEMERAL_DISK_HOSTS:
        monkeypatch.delenv(variable, raising=False)
    assert await commands.run(Settings(_env_file=None), argparse.Namespace()) == 0
    assert len(serve_calls) == 1


async def test_the_command_exits_2_on_a_dyno(tmp_path: Path) -> None:
    keep = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    keep.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", DYNO="web.1", DATA_DIR=str(tmp_path / "data"))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", env=keep, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 2
    assert stdout == b"" and stderr.decode().startswith("relaybot: DYNO is set") and stderr.count(b"\n") == 1
    assert not (tmp_path / "data").exists()  # refused before the embedded database was created
