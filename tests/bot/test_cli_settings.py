"""`relaybot run`'s settings path (bot.cli.configure): every platform group of the table is read and its secrets
masked in the log, whatever module a process imported first (issue 23)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from adapters.platform import Platform
from core.config import Settings
from core.platform_settings import PlatformSettings

REPO = Path(__file__).resolve().parents[2]
TOKEN = "xoxb-cli-SECRET-7c41"
DISCORD_TOKEN = "discord-cli-SECRET-90ab"

# A fresh interpreter imports `first`, then takes run's settings path and logs both tokens.
SCRIPT = """
import importlib, logging, os, sys
importlib.import_module(sys.argv[1])
from bot import cli
settings = cli.configure(cli.build_parser().parse_args(["run"]))
logging.getLogger("relaybot.test").warning("tokens %s %s", os.environ["SLACK_BOT_TOKEN"], os.environ["DISCORD_TOKEN"])
"""


@pytest.mark.parametrize("first", ["core.config", "core.platform_settings", "bot.cli", "bot.commands", "bot.runtime"])
def test_run_masks_slack_and_discord_tokens_whatever_was_imported_first(first: str, tmp_path: Path) -> None:
    kept = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE", "TMPDIR")}
    environment = {
        **kept, "PYTHONPATH": str(REPO), "EMBEDDING_PROVIDER": "none", "SLACK_BOT_TOKEN": TOKEN,
        "DISCORD_TOKEN": DISCORD_TOKEN,
    }
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, first], env=environment, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "tokens " in result.stderr
    assert TOKEN not in result.stderr and DISCORD_TOKEN not in result.stderr, result.stderr


class UnlistedSettings(PlatformSettings):
    """A group no `platform` name registers: only a table entry names it."""

    model_config = SettingsConfigDict(env_prefix="UNLISTED_")
    token: str | None = Field(default=None, repr=False)


async def _no_doctor(settings: Settings) -> str:
    return "not configured"


def test_read_settings_reads_each_group_the_table_names_and_knows_its_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bot.cli import read_settings

    monkeypatch.chdir(tmp_path)  # no .env
    monkeypatch.setenv("UNLISTED_TOKEN", "unlisted-SECRET-1d2e")
    entry = Platform(
        name="unlisted", settings=UnlistedSettings, adapter=None, doctor=_no_doctor,  # type: ignore[arg-type]
        workspace_word="SPACE", emulator="tests.support.toychat.emulator:ToyChatServer",
    )
    settings = read_settings((entry,))
    assert settings.platform_settings(UnlistedSettings).token == "unlisted-SECRET-1d2e"
    assert "unlisted-SECRET-1d2e" in settings.secret_values()
