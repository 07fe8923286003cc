"""`relaybot teams` lists the Slack installs; `relaybot teams import` stores SLACK_BOT_TOKEN's workspace as one (issue
25: an existing deployment moves over); `relaybot run` in multi-workspace mode without SECRET_KEY exits 2 with a sentence."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.slack.installations import Sealer, SlackInstallations
from adapters.slack.team_tokens import TeamKey
from bot.cli import build_parser
from bot.teams_cli import teams
from core.retrieval.store import list_sources, upsert_source
from core.store.db import Database
from core.store.installations import InstallStore
from tests.emulators.slack import SlackEmulator
from tests.support.engine import test_settings as make_settings
from tests.support.relaybot_process import reachable_workdir, run_relaybot

REPO = Path(__file__).resolve().parents[2]
KEY = "the teams command test's key of enough length"


async def test_import_stores_the_bot_token_as_an_install_and_the_list_shows_it(
    db: Database, database_url: str, tmp_path: Path, slack_emulator: SlackEmulator,
    capsys: pytest.CaptureFixture[str],
) -> None:
    slack = slack_emulator
    settings = make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=tmp_path,
                             slack_bot_token=slack.bot_token, slack_api_url=slack.api_url, secret_key=KEY)

    async def run(*argv: str) -> int:
        return await teams(settings, build_parser().parse_args(["teams", *argv]))

    assert await run() == 0
    assert "No Slack installs are stored" in capsys.readouterr().out
    async with db.connection() as conn:
        await upsert_source(conn, name="handbook", kind="files", uri="/handbook", exposure="prefetch")

    assert await run("import") == 0
    out = capsys.readouterr().out
    assert f"Imported SLACK_BOT_TOKEN as the install of Slack team {slack.team_id}" in out
    assert "The deployment's sources are now this team's: handbook." in out
    installs = SlackInstallations(InstallStore(db), sealer=Sealer(KEY), client_id="")
    assert await installs.bot_token(TeamKey(slack.team_id)) == slack.bot_token
    bot = await installs.async_find_bot(enterprise_id=None, team_id=slack.team_id)
    assert bot is not None and bot.bot_user_id == slack.bot_user_id and bot.bot_id == slack.bot_id
    assert [source.owner for source in await list_sources(db)] == [f"slack:{slack.team_id}"]

    assert await run("list") == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split() == ["TEAM", "ENTERPRISE", "INSTALLED", "BY", "WHEN", "SCOPES", "TOKEN", "EXPIRES", "HEALTH"]
    assert slack.team_id in listing[1] and "(imported)" in listing[1] and "never" in listing[1]
    assert listing[1].endswith("ok") and slack.bot_token not in "\n".join(listing)


async def test_import_without_its_token_or_key_is_refused_and_a_refused_token_imports_nothing(
    db: Database, database_url: str, tmp_path: Path, slack_emulator: SlackEmulator,
    capsys: pytest.CaptureFixture[str],
) -> None:
    slack = slack_emulator
    async with db.connection() as conn:  # the module's database: the test above imported its own
        await conn.execute("DELETE FROM slack_bots")
    base = {"database_url": database_url, "data_dir": tmp_path, "slack_api_url": slack.api_url}
    for missing, sentence in ((dict(secret_key=KEY), "SLACK_BOT_TOKEN is not set"),
                              (dict(slack_bot_token=slack.bot_token), "SECRET_KEY is not set")):
        settings = make_settings("http://127.0.0.1:9/v1", **base, **missing)
        assert await teams(settings, build_parser().parse_args(["teams", "import"])) == 2
        assert sentence in capsys.readouterr().err
    slack.revoke_token(slack.bot_token)
    settings = make_settings("http://127.0.0.1:9/v1", **base, slack_bot_token=slack.bot_token, secret_key=KEY)
    assert await teams(settings, build_parser().parse_args(["teams", "import"])) == 1
    assert "Slack refused SLACK_BOT_TOKEN (invalid_auth); nothing was imported." in capsys.readouterr().err
    assert await InstallStore(db).bots() == []


@pytest.fixture
def workdir() -> Iterator[Path]:
    with reachable_workdir("relaybot-teams-") as path:
        yield path


async def test_run_in_multi_workspace_mode_without_secret_key_exits_2_with_a_sentence(
    database_url: str, workdir: Path, slack_emulator: SlackEmulator,
) -> None:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE", "TMPDIR")}
    env = {**keep, "PYTHONPATH": str(REPO), "DATABASE_URL": database_url, "DATA_DIR": str(workdir / "data"),
           "EMBEDDING_PROVIDER": "none", "LLM_BASE_URL": "http://127.0.0.1:9/v1", "HTTP_PORT": "0",
           "SLACK_CLIENT_ID": "1111.2222", "SLACK_CLIENT_SECRET": "s", "SLACK_SIGNING_SECRET": "x",
           "SLACK_API_URL": slack_emulator.api_url}
    code, out, err = await run_relaybot("run", env=env, cwd=workdir)
    assert code == 2, err
    assert "SLACK_CLIENT_ID and SLACK_CLIENT_SECRET are set (several workspaces), so the bot tokens are stored " \
           "encrypted and SECRET_KEY must be set" in err
    assert "Traceback" not in err


async def test_reseal_moves_every_stored_token_to_the_new_key(
    db: Database, database_url: str, tmp_path: Path, slack_emulator: SlackEmulator,
    capsys: pytest.CaptureFixture[str],
) -> None:
    slack = slack_emulator
    new_key = "the key this deployment rotates to which is long enough"
    base = {"database_url": database_url, "data_dir": tmp_path, "slack_api_url": slack.api_url,
            "slack_bot_token": slack.bot_token}
    old = make_settings("http://127.0.0.1:9/v1", **base, secret_key=KEY)
    assert await teams(old, build_parser().parse_args(["teams", "import"])) == 0
    rotating = make_settings("http://127.0.0.1:9/v1", **base, secret_key=f"{new_key},{KEY}")
    assert await teams(rotating, build_parser().parse_args(["teams", "reseal"])) == 0
    assert "Resealed 2 stored Slack token rows" in capsys.readouterr().out
    installs = SlackInstallations(InstallStore(db), sealer=Sealer(new_key), client_id="")
    assert await installs.bot_token(TeamKey(slack.team_id)) == slack.bot_token
    # A key that opens none of them changes nothing.
    wrong = make_settings("http://127.0.0.1:9/v1", **base, secret_key="a key that never sealed any of these rows")
    assert await teams(wrong, build_parser().parse_args(["teams", "reseal"])) == 1
    assert "nothing was changed" in capsys.readouterr().err
    assert await installs.bot_token(TeamKey(slack.team_id)) == slack.bot_token


async def test_check_asks_slack_about_each_install(
    db: Database, database_url: str, tmp_path: Path, slack_emulator: SlackEmulator,
    capsys: pytest.CaptureFixture[str],
) -> None:
    slack = slack_emulator
    async with db.connection() as conn:
        await conn.execute("DELETE FROM slack_bots")
    settings = make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=tmp_path,
                             slack_bot_token=slack.bot_token, slack_api_url=slack.api_url, secret_key=KEY)

    async def run(*argv: str) -> int:
        return await teams(settings, build_parser().parse_args(["teams", *argv]))

    assert await run("import") == 0
    capsys.readouterr()
    assert await run("check") == 0
    assert capsys.readouterr().out.strip() == f"{slack.team_id}: ok — the bot token is accepted (Emulator)"
    slack.revoke_token(slack.bot_token)
    assert await run("check") == 1
    assert capsys.readouterr().out.strip() == f"{slack.team_id}: FAILED — invalid_auth"
