"""`relaybot ingest --crawl/--sitemap/--sync-every` and `relaybot sources sync`, as a user runs them."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from bot.cli_quantities import format_duration, parse_duration, parse_size
from bot.ingest_cli import add_ingest_commands
from tests.bot.test_ingest_cli import relaybot


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_ingest_commands(parser.add_subparsers(dest="command"))
    return parser


def test_crawl_and_sync_arguments_parse() -> None:
    args = parser().parse_args(
        ["ingest", "https://d.test/", "--crawl", "--depth", "3", "--max-pages", "50", "--max-bytes", "20MB",
         "--sync-every", "1h"]
    )
    assert args.crawl and (args.depth, args.max_pages, args.max_bytes, args.sync_every) == (3, 50, 20_000_000, 3600)
    args = parser().parse_args(["ingest", "--sitemap", "https://d.test/sitemap.xml", "--sync-every", "0"])
    assert args.targets == [] and args.sitemap == ["https://d.test/sitemap.xml"] and args.sync_every == 0
    assert parser().parse_args(["sources", "sync"]).name is None
    assert parser().parse_args(["sources", "sync", "docs"]).name == "docs"
    assert [parse_duration(text) for text in ("90", "90s", "15m", "24h", "7d", "0")] == [90, 90, 900, 86400, 604800, 0]
    assert parse_size("500k") == 500_000 and parse_size("1G") == 1_000_000_000
    assert [format_duration(s) for s in (None, 0, 3600, 86400, 90)] == ["never", "never", "1h", "1d", "90s"]
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
        parse_duration("soon")


async def test_ingest_remembers_then_sources_sync_reports_an_unreachable_folder(
    database_url: str, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nThe deploy key lives in the vault.\n")
    env = {"DATABASE_URL": database_url, "EMBEDDING_PROVIDER": "none"}

    code, out, err = await relaybot("ingest", "docs", "--source", "guide", "--sync-every", "1h", cwd=tmp_path, **env)
    assert code == 0, err
    code, out, err = await relaybot("sources", "list", cwd=tmp_path, **env)
    header, row = out.strip().splitlines()
    assert header.split()[5:8] == ["LAST", "SYNCED", "STATUS"]
    assert row.split()[7:9] == ["ok", "1h"]

    (docs / "faq.md").write_text("# FAQ\n\nAsk in the channel.\n")
    # The folder was given relative to tmp_path; a sync from elsewhere still finds it.
    code, out, err = await relaybot("sources", "sync", "guide", cwd=tmp_path.parent, **env)
    assert code == 0, err
    assert 'Source "guide" synced: added 1, updated 0, unchanged 1, removed 0' in out

    shutil.rmtree(docs)
    code, out, err = await relaybot("sources", "sync", cwd=tmp_path, **env)
    assert code == 1
    assert 'Source "guide" is marked error, nothing was pruned' in out and "no such file or folder" in out
    code, out, err = await relaybot("sources", "list", cwd=tmp_path, **env)
    assert " error " in out and "guide: last sync failed:" in out and " 2 " in out  # both documents kept

    code, out, err = await relaybot("sources", "sync", "nope", cwd=tmp_path, **env)
    assert code == 1 and 'no source named "nope"' in err
    code, out, err = await relaybot("ingest", "--source", "guide", cwd=tmp_path, **env)
    assert code == 2 and "name a file, folder or URL" in err
