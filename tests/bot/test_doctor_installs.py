"""`relaybot doctor` with several Slack workspaces (issue 25): one line per stored install, its token tried with
auth.test (the same check as `relaybot teams check`); one refused install fails the doctor, naming that install."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from slack_sdk.oauth.installation_store import Installation

from adapters.slack.installations import Sealer, SlackInstallations
from bot.doctor import run_checks
from core.config import Settings
from core.store.db import Database
from core.store.installations import InstallStore
from tests.emulators.openai_server import OpenAIEmulator
from tests.emulators.slack import SlackEmulator

KEY = "the doctor installs test's key of enough length"


async def test_doctor_checks_each_slack_install_and_fails_on_a_refused_one(
    db: Database, database_url: str, tmp_path: Path, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator,
    capsys: pytest.CaptureFixture[str],
) -> None:
    slack = slack_emulator
    other = slack.add_team("T0DOCTOR2", name="Beta")
    installs = SlackInstallations(InstallStore(db), sealer=Sealer(KEY), client_id="cid")
    for team_id, token, name in ((slack.team_id, slack.bot_token, "Alpha"), (other.team_id, other.bot_token, "Beta")):
        await installs.async_save(Installation(team_id=team_id, team_name=name, bot_token=token, bot_id="B1",
                                               bot_user_id="UB1", user_id="U1", installed_at=time.time()))
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, database_url=database_url, data_dir=tmp_path, llm_base_url=openai_emulator.base_url,
        embedding_provider="none", slack_client_id="cid", slack_client_secret="csecret", slack_signing_secret="s",
        secret_key=KEY, slack_api_url=slack.api_url,
    )

    async def doctor() -> tuple[int, dict[str, str]]:
        code = await run_checks(settings)
        return code, dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())

    code, lines = await doctor()
    assert lines["slack"].startswith("ok — several workspaces"), lines
    assert lines[f"slack {slack.team_id}"] == f"ok — the bot token is accepted ({slack.team(slack.team_id).name})"
    assert lines[f"slack {other.team_id}"] == "ok — the bot token is accepted (Beta)"
    assert code == 0, lines

    slack.revoke_token(other.bot_token)
    code, lines = await doctor()
    assert lines[f"slack {other.team_id}"] == "FAILED — invalid_auth"
    assert lines[f"slack {slack.team_id}"].startswith("ok — ")
    assert code == 1

    async with db.connection() as conn:
        await conn.execute("DELETE FROM slack_bots")
    code, lines = await doctor()
    assert lines["slack installs"] == "none stored yet" and code == 0
