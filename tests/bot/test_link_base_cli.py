"""`relaybot ingest --link-base` and `relaybot sources set-link-base` as a user runs them."""

from __future__ import annotations

import argparse
from pathlib import Path

from bot.ingest_cli import add_ingest_commands
from tests.bot.test_ingest_cli import relaybot

BASE = "https://github.com/acme/handbook/blob/main/docs/"


def test_the_link_arguments_parse() -> None:
    parser = argparse.ArgumentParser()
    add_ingest_commands(parser.add_subparsers(dest="command"))
    assert parser.parse_args(["ingest", "docs", "--link-base", BASE]).link_base == BASE
    assert parser.parse_args(["ingest", "docs"]).link_base is None
    args = parser.parse_args(["sources", "set-link-base", "docs", BASE, "--root", "/srv/docs"])
    assert (args.sources_command, args.name, args.url, args.root) == ("set-link-base", "docs", BASE, "/srv/docs")


async def test_ingest_with_a_link_base_then_change_and_clear_it(database_url: str, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nThe deploy key lives in the vault.\n")
    env = {"DATABASE_URL": database_url, "EMBEDDING_PROVIDER": "none"}

    code, out, err = await relaybot("ingest", str(docs), "--source", "docs", "--link-base", "docs.example", cwd=tmp_path, **env)
    assert code == 2 and "http(s) address" in err

    code, out, err = await relaybot("ingest", str(docs), "--source", "docs", "--link-base", BASE, cwd=tmp_path, **env)
    assert code == 0, err
    code, out, err = await relaybot("sources", "list", cwd=tmp_path, **env)
    header, row = out.strip().splitlines()
    assert "LINKS TO" in header and BASE in row

    code, out, err = await relaybot("sources", "set-link-base", "docs", "", cwd=tmp_path, **env)
    assert code == 0 and "no longer links" in out
    code, out, err = await relaybot("sources", "set-link-base", "docs", "https://wiki.example/", cwd=tmp_path, **env)
    assert code == 0 and f"https://wiki.example/ (paths under {docs.resolve()})" in out
