"""`relaybot channels` and `relaybot sources restrict | grant | revoke | access`: changes applied, shown
with their origin, and audited as `cli:<user>`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.channels_cli import channels, cli_actor, dm_target, parse_changes
from bot.cli import build_parser
from bot.sources_cli import sources
from core.retrieval.ingest import IngestRequest, ingest
from core.store.db import Database
from tests.support.engine import test_settings as make_settings


async def test_set_show_list_history(database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=tmp_path, approvers="U1")

    async def run(*argv: str) -> int:
        return await channels(settings, build_parser().parse_args(["channels", *argv]))

    assert await run("set", "slack:T1", "model=big-model") == 0
    assert await run(
        "set", "slack:T1:C1", "agent_type=research", "approvers=U7,U8", "followups_need_mention=true",
        'tool_policy={"read_url": "always"}',
    ) == 0
    capsys.readouterr()
    assert await run("show", "slack:T1:C1") == 0
    shown = capsys.readouterr().out
    assert "research  (slack:T1:C1)" in shown and "big-model  (slack:T1)" in shown and "U7, U8" in shown
    assert "read_url" in shown and "restricted sources granted here: none" in shown
    assert await run("set", "slack:T1:C1", "agent_type=") == 0  # cleared: back to the settings
    assert "agent_type: research → -" in capsys.readouterr().out
    assert await run("list") == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].startswith("slack:T1  model=big-model")
    assert listing[1].startswith("slack:T1:C1  approvers=U7, U8;") and "agent_type" not in listing[1]
    assert await run("history", "slack:T1:C1") == 0
    history = capsys.readouterr().out.splitlines()
    assert history[0].endswith("agent_type: research → -") and cli_actor() in history[0]
    assert len(history) == 5

    assert await run("set", "slack:T1:C1", "agent_type=wizard") == 2
    assert await run("set", "nowhere", "model=x") == 2
    assert await run("set", "slack:T1:C1", "colour=red") == 2
    assert "unknown field" in capsys.readouterr().err


async def test_restrict_and_grant_a_source(database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\ntext\n")
    db = Database(url=database_url, data_dir=tmp_path)
    await db.open()
    try:
        await ingest(
            db, IngestRequest(source="finance", exposure="prefetch", targets=[str(tmp_path / "docs")]),
            embedder=None,
        )
    finally:
        await db.close()

    async def run(*argv: str) -> int:
        return await sources(settings, build_parser().parse_args(["sources", *argv]))

    assert await run("grant", "finance", "--channel", "slack:T1:C1") == 0
    assert "open to all" in capsys.readouterr().out  # a grant on an open source changes nothing yet: said so
    assert await run("restrict", "finance") == 0
    assert await run("grant", "finance", "--dms", "discord") == 0
    assert await run("access") == 0
    assert "finance  restricted; granted to discord:@dm:dms, slack:T1:C1" in capsys.readouterr().out
    assert await run("revoke", "finance", "--channel", "slack:T1:C1") == 0
    assert await run("grant", "finance", "--channel", "slack:T1") == 2  # a workspace is not a channel
    assert await run("grant", "nope", "--channel", "slack:T1:C1") == 1
    assert await run("open", "finance") == 0
    assert "open to every channel" in capsys.readouterr().out
    assert await channels(settings, build_parser().parse_args(["channels", "history", "source:finance"])) == 0
    assert "restricted: true → false" in capsys.readouterr().out


def test_parsing() -> None:
    assert parse_changes(["tools=calculator, read_url", "system_prompt=Be brief.", "sources="]) == (
        {"tools": ["calculator", "read_url"], "system_prompt": "Be brief."}, ["sources"],
    )
    assert dm_target("slack:T1") == "slack:T1:dms"


def test_doctor_warns_on_pgvector_before_iterative_scans() -> None:
    from bot.doctor import pgvector_note

    assert "upgrade to 0.8" in pgvector_note("0.7.4")
    assert pgvector_note("0.8.0") == "" and pgvector_note("1.0") == ""
