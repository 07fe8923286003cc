"""`relaybot ingest --team` and `relaybot sources … --team` as a user runs them: with two Slack teams installed, a
source says whose it is (issue 25's tenant isolation), and one team's name never reaches another's source."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from bot.sources_cli import parse_team
from tests.bot.test_ingest_cli import relaybot


def test_a_team_is_written_as_its_owner() -> None:
    assert parse_team("T0123") == "slack:T0123"
    assert parse_team("slack:T0123") == "slack:T0123"
    assert parse_team("discord:987") == "discord:987"
    assert parse_team("none") == ""
    for wrong in ("teams:T1", "slack:", "slack:T1:C1", "T 1"):
        with pytest.raises(ValueError, match="names no team"):
            parse_team(wrong)


def owners(database_url: str) -> dict[str, str]:
    with psycopg.connect(database_url) as conn:
        return dict(conn.execute("SELECT name, owner FROM sources").fetchall())


async def test_with_two_teams_installed_a_source_must_say_its_team(database_url: str, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nThe deploy key lives in the vault.\n")
    env = {"DATABASE_URL": database_url, "EMBEDDING_PROVIDER": "none"}
    code, out, err = await relaybot("migrate", cwd=tmp_path, **env)
    assert code == 0, err
    with psycopg.connect(database_url) as conn:
        for team in ("T1", "T2"):
            conn.execute("INSERT INTO slack_bots (team_id, fields, sealed) VALUES (%s, '{}', '\\x00')", (team,))

    code, out, err = await relaybot("ingest", str(docs), "--source", "guide", cwd=tmp_path, **env)
    assert code == 2 and "several Slack teams are installed" in err and "--team" in err, (code, err)
    assert owners(database_url) == {}

    code, out, err = await relaybot("ingest", str(docs), "--source", "guide", "--team", "T1", cwd=tmp_path, **env)
    assert code == 0, err
    assert owners(database_url) == {"guide": "slack:T1"}
    # Team T2 cannot write into T1's source by naming it.
    code, out, err = await relaybot("ingest", str(docs), "--source", "guide", "--team", "T2", cwd=tmp_path, **env)
    assert code == 2 and 'the source "guide" belongs to team slack:T1' in err, (code, err)

    code, out, err = await relaybot("sources", "list", "--team", "T2", cwd=tmp_path, **env)
    assert code == 0 and "guide" not in out, out
    code, out, err = await relaybot("sources", "list", cwd=tmp_path, **env)
    assert code == 0 and "slack:T1" in out.splitlines()[1], out

    code, out, err = await relaybot("sources", "remove", "guide", cwd=tmp_path, **env)
    assert code == 2 and "--team" in err, (code, err)
    code, out, err = await relaybot("sources", "remove", "guide", "--team", "T2", cwd=tmp_path, **env)
    assert code == 1 and 'no source named "guide" of team slack:T2' in err, (code, err)
    assert owners(database_url) == {"guide": "slack:T1"}

    code, out, err = await relaybot("sources", "set-team", "guide", "none", cwd=tmp_path, **env)
    assert code == 0 and "now belongs to this deployment" in out, err
    assert owners(database_url) == {"guide": ""}
    code, out, err = await relaybot("sources", "remove", "guide", "--team", "none", cwd=tmp_path, **env)
    assert code == 0, err
    assert owners(database_url) == {}
