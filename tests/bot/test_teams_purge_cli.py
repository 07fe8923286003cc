"""`relaybot teams purge` (issue 25): every row of a team the bot left deleted, a team still installed refused unless
--force, a Grid org's workspaces purged with it, and Discord servers by `--platform discord`."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from bot.cli import build_parser
from bot.teams_cli import teams
from core.ports import InstallRecord
from core.retrieval.store import upsert_source
from core.store.app_state import AppStateStore
from core.store.db import Database
from core.store.installations import InstallStore
from core.store.usage import TurnUsage, UsageLog
from tests.emulators.discord import DiscordEmulator
from tests.support.engine import test_settings as make_settings


async def seed(db: Database, platform: str, workspace: str) -> None:
    """A usage row and a source of the team: rows purge deletes."""
    await UsageLog(db).add(TurnUsage(turn_id=str(uuid.uuid4()), platform=platform, workspace=workspace, channel="C1",
                                     user="U1", model="m", prompt_tokens=1, completion_tokens=1))
    async with db.connection() as conn:
        await upsert_source(conn, name=f"docs-{workspace}", kind="files", uri=f"/docs/{workspace}", exposure="prefetch",
                            owner=f"{platform}:{workspace}")


async def rows(db: Database, platform: str, workspace: str) -> int:
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT (SELECT count(*) FROM token_usage WHERE platform = %s AND workspace = %s)"
            " + (SELECT count(*) FROM sources WHERE owner = %s)", (platform, workspace, f"{platform}:{workspace}"))
        row = await cursor.fetchone()
    return int(row[0]) if row else -1


def bot(team_id: str, enterprise_id: str = "", *, org_wide: bool = False) -> InstallRecord:
    return InstallRecord(enterprise_id=enterprise_id, team_id=team_id, is_enterprise_install=org_wide, sealed=b"x")


async def test_purge_refuses_an_installed_team_deletes_a_gone_ones_rows_and_leaves_the_others(
    db: Database, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    settings = make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=tmp_path)

    async def run(*argv: str) -> int:
        return await teams(settings, build_parser().parse_args(["teams", "purge", *argv]))

    for team in ("TA", "TB", "TG1", "TG2", "TC"):
        await seed(db, "slack", team)
    await InstallStore(db).save(bot=bot("TA"), installer=None)
    await InstallStore(db).save(bot=bot("", "E1", org_wide=True), installer=None)
    await AppStateStore(db).put("slack.org_of:TG1", "E1")  # as the team clients learn a Grid workspace's org
    await AppStateStore(db).put("slack.org_of:TG2", "E1")

    # Installed: its own bot (TA), its org's org-wide one (TG1), the org itself (E1): nothing purged at all.
    for named in ("TA", "TG1", "E1"):
        assert await run(named, "TB") == 1
        err = capsys.readouterr().err
        assert f"the bot is still installed in Slack team {named}: uninstall it there first" in err, err
        assert "nothing was purged" in err
        assert await rows(db, "slack", "TB") == 2

    assert await run("TB") == 0
    assert capsys.readouterr().out.startswith("Purged slack:TB: 2 rows deleted (1 token_usage")
    assert await rows(db, "slack", "TB") == 0
    assert await rows(db, "slack", "TA") == 2  # another team's rows are untouched

    # --force purges a team still installed; its install stays.
    assert await run("--force", "TA") == 0
    assert await rows(db, "slack", "TA") == 0 and sorted(b.team_id for b in await InstallStore(db).bots()) == ["", "TA"]

    # An org: each workspace its events named, once uninstalled; the workspaces it learnt are forgotten too.
    async with db.connection() as conn:
        await conn.execute("DELETE FROM slack_bots WHERE enterprise_id = 'E1'")
    assert await run("E1") == 0
    out = capsys.readouterr().out
    assert "Purged slack:TG1:" in out and "Purged slack:TG2:" in out
    assert await rows(db, "slack", "TG1") == 0 and await rows(db, "slack", "TG2") == 0
    assert await AppStateStore(db).get("slack.org_of:TG1") is None
    assert await rows(db, "slack", "TC") == 2


async def test_purge_of_discord_servers_asks_discord_which_the_bot_is_still_in(
    db: Database, database_url: str, tmp_path: Path, discord_emulator: DiscordEmulator,
    capsys: pytest.CaptureFixture[str],
) -> None:
    joined = str(discord_emulator.add_guild("still here"))
    left = str(discord_emulator.add_guild("left", bot_added=False))
    for guild in (joined, left):
        await seed(db, "discord", guild)
    settings = make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=tmp_path,
                             discord_token=discord_emulator.token, discord_api_base=discord_emulator.api_base)

    async def run(config: object, *argv: str) -> int:
        return await teams(config, build_parser().parse_args(["teams", "purge", "--platform", "discord", *argv]))  # type: ignore[arg-type]

    assert await run(settings, joined, left) == 1
    assert f"still installed in Discord server {joined}: uninstall it there first" in capsys.readouterr().err
    assert await rows(db, "discord", left) == 2
    assert await run(settings, left) == 0
    assert capsys.readouterr().out.startswith(f"Purged discord:{left}: 2 rows deleted")
    assert await rows(db, "discord", left) == 0 and await rows(db, "discord", joined) == 2

    # Without DISCORD_TOKEN nobody can ask Discord: refused, unless --force.
    blind = make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=tmp_path)
    assert await run(blind, joined) == 1
    assert "DISCORD_TOKEN is not set" in capsys.readouterr().err and await rows(db, "discord", joined) == 2
    assert await run(blind, "--force", joined) == 0
    assert await rows(db, "discord", joined) == 0
