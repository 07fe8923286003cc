"""Source sync: what changed is re-read, what is gone pruned, an unreachable root prunes nothing, and
two processes racing sync each source once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.retrieval.crawl import CrawlOptions, FetchPolicy
from core.retrieval.embeddings import OpenAIEmbeddings
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.source_lease import SourceBusy, SourceLease
from core.retrieval.sync import SourceSyncer, source_ids, sync_states
from core.retrieval.targets import load_targets
from core.store.db import Database
from tests.core.retrieval.test_crawl import LOOPBACK, Site, page
from tests.emulators.openai_server import OpenAIEmulator

DAY_S = 86400


@pytest.fixture(autouse=True)
async def empty_tables(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")


def embedder(emulator: OpenAIEmulator) -> OpenAIEmbeddings:
    return OpenAIEmbeddings(base_url=emulator.base_url, api_key="k", model="text-embedding-3-small")


def write_folder(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


async def make_due(db: Database, *names: str) -> None:
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE sources SET last_synced_at = now() - make_interval(secs => sync_interval_s + 1) WHERE name = ANY(%s)",
            (list(names),),
        )


async def documents(db: Database, source: str) -> dict[str, list[int]]:
    """Each document's file name with its chunk ids (new ids mean re-chunked)."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT d.uri, array_agg(c.id ORDER BY c.id) FROM documents d JOIN sources s ON s.id = d.source_id"
            " JOIN chunks c ON c.document_id = d.id WHERE s.name = %s GROUP BY d.uri",
            (source,),
        )
        return {uri.rsplit("/", 1)[-1]: ids for uri, ids in await cursor.fetchall()}


async def test_a_sync_updates_exactly_the_edited_added_and_removed_files(
    db: Database, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    folder = write_folder(tmp_path / "docs", {
        "keep.md": "# Keep\n\nThe pager rota is on the wiki.\n",
        "edit.md": "# Edit\n\nBackups run at two.\n",
        "gone.md": "# Gone\n\nThe old VPN is retired.\n",
    })
    provider = embedder(openai_emulator)
    await ingest(
        db, IngestRequest(source="docs", exposure="prefetch", targets=[str(folder)], sync_interval_s=3600),
        embedder=provider,
    )
    before = await documents(db, "docs")
    syncer = SourceSyncer(db, embedder=provider, policy=LOOPBACK)
    assert await syncer.run_due() == []  # synced a moment ago: not due

    (folder / "edit.md").write_text("# Edit\n\nBackups now run hourly.\n")
    (folder / "new.md").write_text("# New\n\nThe status page moved.\n")
    (folder / "gone.md").unlink()
    await make_due(db, "docs")
    calls = openai_emulator.embedding_calls
    [result] = await syncer.run_due()

    assert result.status == "ok" and result.summary is not None
    summary = result.summary
    assert (summary.added, summary.updated, summary.unchanged, summary.removed) == (1, 1, 1, 1)
    assert openai_emulator.embedding_calls == calls + 1  # the edited and the new file, in one batch
    after = await documents(db, "docs")
    assert sorted(after) == ["edit.md", "keep.md", "new.md"]
    assert after["keep.md"] == before["keep.md"]  # untouched
    assert not set(after["edit.md"]) & set(before["edit.md"])  # re-chunked
    state = (await sync_states(db))["docs"]
    assert (state.status, state.error, state.syncing_by) == ("ok", None, None)
    assert await syncer.run_due() == []  # and now not due again


async def test_two_processes_racing_sync_each_due_source_once(
    db: Database, database_url: str, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    names = [f"team{i}" for i in range(4)]
    for name in names:
        folder = write_folder(tmp_path / name, {"a.md": f"# {name}\n\nFirst words of {name}.\n"})
        await ingest(
            db, IngestRequest(source=name, exposure="prefetch", targets=[str(folder)], sync_interval_s=60),
            embedder=None,
        )
        (folder / "b.md").write_text(f"# More\n\nNew words of {name}.\n")
    await make_due(db, *names)
    calls = openai_emulator.embedding_calls

    # Two processes: their own pools and lease holders over one database, each running its job at once.
    other = Database(url=database_url, data_dir=tmp_path / "other")
    await other.open()
    try:
        first = SourceSyncer(db, embedder=embedder(openai_emulator), policy=LOOPBACK, holder="process-1")
        second = SourceSyncer(other, embedder=embedder(openai_emulator), policy=LOOPBACK, holder="process-2")
        rounds = await asyncio.gather(first.run_due(), second.run_due(), first.run_due(), second.run_due())
    finally:
        await other.close()

    synced = sorted(result.source for results in rounds for result in results)
    assert synced == names  # each once, by one process or the other
    assert all(result.status == "ok" for results in rounds for result in results)
    # Every source had one new file: one embedding call each, never two.
    assert openai_emulator.embedding_calls == calls + len(names)
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM documents")
        assert (await cursor.fetchone())[0] == 2 * len(names)


async def test_a_source_being_synced_is_not_taken_by_another_process(db: Database, tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "docs", {"a.md": "# A\n\nWords.\n"})
    await ingest(
        db, IngestRequest(source="docs", exposure="prefetch", targets=[str(folder)], sync_interval_s=60),
        embedder=None,
    )
    await make_due(db, "docs")
    [source_id] = (await source_ids(db, "docs")).values()
    async with await SourceLease.take(db, source_id, holder="elsewhere"):
        assert (await sync_states(db))["docs"].syncing_by == "elsewhere"
        syncer = SourceSyncer(db, embedder=None, policy=LOOPBACK)
        assert await syncer.run_due() == []
        with pytest.raises(SourceBusy, match="elsewhere"):
            await syncer.sync(source_id)
        with pytest.raises(SourceBusy):
            await ingest(db, IngestRequest(source="docs", exposure="prefetch", targets=[str(folder)]), embedder=None)
    # Given back without a verdict: still due, and taken now.
    [result] = await SourceSyncer(db, embedder=None, policy=LOOPBACK).run_due()
    assert result.source == "docs" and result.status == "ok"


async def test_an_unreachable_folder_marks_the_source_error_and_prunes_nothing(db: Database, tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "docs", {"a.md": "# A\n\nAlpha.\n", "b.md": "# B\n\nBeta.\n"})
    await ingest(
        db, IngestRequest(source="docs", exposure="prefetch", targets=[str(folder)], sync_interval_s=60),
        embedder=None,
    )
    folder.rename(tmp_path / "moved")  # e.g. an unmounted share
    await make_due(db, "docs")
    [result] = await SourceSyncer(db, embedder=None, policy=LOOPBACK).run_due()

    assert result.status == "error" and "no such file or folder" in (result.error or "")
    assert sorted(await documents(db, "docs")) == ["a.md", "b.md"]
    state = (await sync_states(db))["docs"]
    assert state.status == "error" and str(folder) in (state.error or "")


async def test_ingests_add_to_what_a_source_remembers_and_prune_replaces_it(db: Database, tmp_path: Path) -> None:
    one = write_folder(tmp_path / "one", {"a.md": "# A\n\nAlpha.\n"})
    two = write_folder(tmp_path / "two", {"b.md": "# B\n\nBeta.\n"})
    await ingest(
        db, IngestRequest(source="docs", exposure="prefetch", targets=[str(one)], include=["*.md"]),
        embedder=None,
    )
    await ingest(
        db,
        IngestRequest(
            source="docs", exposure="prefetch", targets=["https://example.test/"], crawl=CrawlOptions(depth=1, max_pages=5),
        ),
        embedder=None,
    )
    [source_id] = (await source_ids(db, "docs")).values()
    async with db.connection() as conn:
        targets = await load_targets(conn, source_id)
    assert [(t.target, t.include, t.crawl) for t in targets] == [
        (str(one), ("*.md",), None), ("https://example.test/", (), CrawlOptions(depth=1, max_pages=5)),
    ]
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT sync_interval_s FROM sources WHERE id = %s", (source_id,))
        assert (await cursor.fetchone())[0] is None  # the library's default is never; the CLI's is 24h
    await ingest(
        db, IngestRequest(source="docs", exposure="prefetch", targets=[str(two)], prune=True, sync_interval_s=DAY_S),
        embedder=None,
    )
    async with db.connection() as conn:
        assert [t.target for t in await load_targets(conn, source_id)] == [str(two)]


async def test_a_crawled_source_syncs_by_crawling_again(db: Database, tmp_path: Path) -> None:
    site = Site()
    await site.start()
    try:
        site.pages = {
            "/": ("text/html", page("Home", "The start page of the handbook.", "/a", "/b")),
            "/a": ("text/html", page("Alpha", "Alpha explains the nightly backups.")),
            "/b": ("text/html", page("Beta", "Beta explains restoring a backup.")),
        }
        summary = await ingest(
            db,
            IngestRequest(
                source="web", exposure="prefetch", targets=[f"{site.base}/"], crawl=CrawlOptions(depth=1), sync_interval_s=60,
            ),
            embedder=None, fetch=FetchPolicy(allowed_networks=["127.0.0.1/32"]),
        )
        assert summary.added == 3
        site.pages["/"] = ("text/html", page("Home", "The start page of the handbook.", "/a"))
        site.pages["/a"] = ("text/html", page("Alpha", "Alpha now explains hourly snapshots."))
        await make_due(db, "web")
        syncer = SourceSyncer(db, embedder=None, policy=LOOPBACK)
        [result] = await syncer.run_due()
        assert result.status == "ok" and result.summary is not None
        assert (result.summary.updated, result.summary.unchanged, result.summary.removed) == (2, 0, 1)
        assert sorted(await documents(db, "web")) == ["", "a"]

        await site.stop()  # the site is down: error, and yesterday's pages stay
        await make_due(db, "web")
        [result] = await syncer.run_due()
        assert result.status == "error" and "robots.txt" in (result.error or "")
        assert sorted(await documents(db, "web")) == ["", "a"]
    finally:
        await site.stop()


async def test_a_sitemap_source_syncs_from_the_sitemap_again(db: Database) -> None:
    site = Site()
    await site.start()
    try:
        def sitemap(*paths: str) -> tuple[str, str]:
            urls = "".join(f"<url><loc>{site.base}{path}</loc></url>" for path in paths)
            return "application/xml", f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'

        site.pages = {
            "/sitemap.xml": sitemap("/a", "/b"),
            "/a": ("text/html", page("Alpha", "Alpha explains the nightly backups.")),
            "/b": ("text/html", page("Beta", "Beta explains restoring a backup.")),
        }
        summary = await ingest(
            db,
            IngestRequest(
                source="map", exposure="prefetch", targets=[], sitemaps=[f"{site.base}/sitemap.xml"], sync_interval_s=60,
            ),
            embedder=None, fetch=FetchPolicy(allowed_networks=["127.0.0.1/32"]),
        )
        assert summary.added == 2
        site.pages["/sitemap.xml"] = sitemap("/a")
        await make_due(db, "map")
        [result] = await SourceSyncer(db, embedder=None, policy=LOOPBACK).run_due()
        assert result.status == "ok" and result.summary is not None
        assert (result.summary.unchanged, result.summary.removed) == (1, 1)
        assert sorted(await documents(db, "map")) == ["a"]
    finally:
        await site.stop()
