"""Link bases: file documents cited at their web address, set at ingest or later, without re-ingesting."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.links import LinkBaseError, check_link_base, link_root, web_uri
from core.retrieval.search import PgRetriever
from core.retrieval.store import list_sources, set_link_base
from core.store.db import Database

BASE = "https://github.com/acme/handbook/blob/main/docs/"


@pytest.fixture(autouse=True)
async def empty_tables(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")


def make_docs(root: Path) -> Path:
    (root / "ops").mkdir(parents=True)
    (root / "ops" / "on call (EU).md").write_text("# On call\n\nThe pager rotates weekly between the quokka teams.\n")
    (root / "intro.md").write_text("# Intro\n\nEvery quokka team owns one service.\n")
    return root


async def uris(db: Database, query: str = "quokka") -> dict[str, str]:
    hits = await PgRetriever(db, None).search(query, limit=10)
    return {hit.title.split(" › ")[0]: hit.uri for hit in hits}


def test_a_file_under_the_root_maps_to_the_base_plus_its_quoted_path(tmp_path: Path) -> None:
    path = tmp_path / "docs" / "ops" / "on call (EU)#1.md"
    uri = path.as_uri()
    root = str(tmp_path / "docs")
    assert web_uri(uri, link_base=BASE, root=root) == BASE + "ops/on%20call%20%28EU%29%231.md"
    assert web_uri(uri, link_base=BASE.rstrip("/"), root=root) == BASE + "ops/on%20call%20%28EU%29%231.md"
    # Nothing to map: no base, a file outside the root, a web page.
    assert web_uri(uri, link_base=None, root=root) == uri
    assert web_uri(uri, link_base=BASE, root=str(tmp_path / "elsewhere")) == uri
    assert web_uri("https://wiki.example/page", link_base=BASE, root=root) == "https://wiki.example/page"


def test_the_root_is_the_folder_or_the_files_folder_or_what_holds_them_all(tmp_path: Path) -> None:
    docs = tmp_path / "repo" / "docs"
    wiki = tmp_path / "repo" / "wiki"
    docs.mkdir(parents=True)
    wiki.mkdir()
    (tmp_path / "repo" / "README.md").write_text("hi")
    assert link_root([str(docs)]) == str(docs.resolve())
    assert link_root([str(tmp_path / "repo" / "README.md")]) == str((tmp_path / "repo").resolve())
    assert link_root([str(docs), str(wiki), "https://example.com/x"]) == str((tmp_path / "repo").resolve())
    assert link_root(["https://example.com/x"]) is None


@pytest.mark.parametrize("bad", ["wiki.example/docs", "ftp://example.com/", "https://", "https://exa mple.com/"])
def test_a_link_base_must_be_a_web_address(bad: str) -> None:
    with pytest.raises(LinkBaseError):
        check_link_base(bad)
    assert check_link_base(" https://example.com/docs ") == "https://example.com/docs"


async def test_ingested_with_a_link_base_files_are_cited_at_their_web_address(db: Database, tmp_path: Path) -> None:
    docs = make_docs(tmp_path / "docs")
    await ingest(
        db, IngestRequest(source="handbook", exposure="prefetch", targets=[str(docs)], link_base=BASE),
        embedder=None,
    )
    assert await uris(db) == {"On call": BASE + "ops/on%20call%20%28EU%29.md", "Intro": BASE + "intro.md"}
    [row] = await list_sources(db)
    assert row.link_base == BASE and row.link_root == str(docs.resolve())
    # Re-ingesting part of the folder without a base moves nothing: links still start at docs/.
    await ingest(db, IngestRequest(source="handbook", exposure="prefetch", targets=[str(docs / "ops")]), embedder=None)
    assert (await uris(db))["On call"] == BASE + "ops/on%20call%20%28EU%29.md"


async def test_a_link_base_set_later_applies_to_documents_already_ingested(db: Database, tmp_path: Path) -> None:
    docs = make_docs(tmp_path / "docs")
    await ingest(db, IngestRequest(source="handbook", exposure="prefetch", targets=[str(docs)]), embedder=None)
    assert all(uri.startswith("file://") for uri in (await uris(db)).values())
    row = await set_link_base(db, "handbook", BASE)
    assert row is not None and row.link_root == str(docs.resolve())
    assert (await uris(db))["Intro"] == BASE + "intro.md"
    # A different root, then no base at all: back to file uris (shown as plain titles).
    await set_link_base(db, "handbook", "https://wiki.example/", root=str(tmp_path))
    assert (await uris(db))["Intro"] == "https://wiki.example/docs/intro.md"
    await set_link_base(db, "handbook", None)
    assert all(uri.startswith("file://") for uri in (await uris(db)).values())
    assert await set_link_base(db, "nothing-here", BASE) is None


async def test_a_source_with_no_known_root_needs_one(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("INSERT INTO sources (name, kind, uri) VALUES ('old', 'files', 'docs')")
    with pytest.raises(LinkBaseError, match="--root"):
        await set_link_base(db, "old", BASE)
    row = await set_link_base(db, "old", BASE, root="/srv/docs")
    assert row is not None and row.link_root == "/srv/docs"


async def test_a_link_base_needs_a_file_or_folder_to_map(db: Database) -> None:
    with pytest.raises(LinkBaseError):
        await ingest(
            db, IngestRequest(source="web", exposure="prefetch", targets=["https://example.com/page"], link_base=BASE),
            embedder=None,
        )
