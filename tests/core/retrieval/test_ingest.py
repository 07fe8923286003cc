"""Ingestion into Postgres: incremental re-ingest, replacement, pruning, lexical search, SSRF refusals."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

from core.retrieval.embeddings import OpenAIEmbeddings
from core.retrieval.ingest import IngestProgress, IngestRequest, ingest
from core.retrieval.links import LinkBaseError, check_link_base
from core.retrieval.search import PgRetriever
from core.retrieval.store import list_sources, remove_source
from core.store.db import Database
from tests.core.retrieval.test_loaders import minimal_pdf
from tests.emulators.openai_server import OpenAIEmulator


@pytest.fixture(autouse=True)
async def empty_tables(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")


def make_docs(root: Path) -> Path:
    root.mkdir()
    (root / "backups.md").write_text(
        "# Backups\n\n## Nightly\n\nThe database is dumped every night at 02:00 to the zephyrine bucket.\n"
    )
    (root / "onboarding.html").write_text(
        "<html><head><title>Onboarding</title></head><body><nav>menu</nav>"
        "<h1>Onboarding</h1><p>New engineers request a laptop from the quartermaster desk.</p></body></html>"
    )
    (root / "handbook.pdf").write_bytes(minimal_pdf("Vacation requests go to the people team", title="Handbook"))
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    return root


async def chunk_ids(db: Database, uri_suffix: str) -> list[int]:
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.uri LIKE %s ORDER BY c.id",
            (f"%{uri_suffix}",),
        )
        return [row[0] for row in await cursor.fetchall()]


async def test_reingest_is_incremental_and_an_edit_replaces_only_that_document(
    db: Database, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    docs = make_docs(tmp_path / "docs")
    embedder = OpenAIEmbeddings(base_url=openai_emulator.base_url, api_key="k", model="text-embedding-3-small")
    seen: list[IngestProgress] = []

    first = await ingest(
        db, IngestRequest(source="docs", exposure="prefetch", targets=[str(docs)]),
        embedder=embedder, progress=seen.append,
    )
    assert (first.added, first.updated, first.unchanged) == (3, 0, 0)
    assert [uri.rsplit("/", 1)[-1] for uri, _ in first.skipped] == ["logo.png"]
    assert "not a supported type" in first.skipped[0][1]
    assert first.embeddings == first.chunks >= 3
    assert seen[-1].documents == 4 and seen[-1].chunks == first.chunks and seen[-1].embeddings == first.embeddings
    calls_after_first = openai_emulator.embedding_calls
    assert calls_after_first >= 1

    # Unchanged files: not a single embedding call.
    again = await ingest(db, IngestRequest(source="docs", exposure="prefetch", targets=[str(docs)]), embedder=embedder)
    assert (again.added, again.updated, again.unchanged, again.chunks, again.embeddings) == (0, 0, 3, 0, 0)
    assert openai_emulator.embedding_calls == calls_after_first

    html_ids, pdf_ids = await chunk_ids(db, "onboarding.html"), await chunk_ids(db, "handbook.pdf")
    old_md_ids = await chunk_ids(db, "backups.md")
    (docs / "backups.md").write_text("# Backups\n\nSnapshots now go to the aurelian vault every hour.\n")
    edited = await ingest(db, IngestRequest(source="docs", exposure="prefetch", targets=[str(docs)]), embedder=embedder)
    assert (edited.added, edited.updated, edited.unchanged) == (0, 1, 2)
    assert openai_emulator.embedding_calls == calls_after_first + 1
    assert await chunk_ids(db, "onboarding.html") == html_ids
    assert await chunk_ids(db, "handbook.pdf") == pdf_ids
    new_md_ids = await chunk_ids(db, "backups.md")
    assert new_md_ids and not set(new_md_ids) & set(old_md_ids)

    retriever = PgRetriever(db, embedder)
    found = await retriever.search("aurelian vault", limit=3)
    assert found[0].uri.endswith("backups.md") and "aurelian" in found[0].text
    assert found[0].source == "docs" and found[0].chunk_id in new_md_ids
    # The old text is gone with its chunks (words only: the vector branch always has a nearest chunk).
    assert not await PgRetriever(db, None).search("zephyrine", limit=3)
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM chunk_embeddings WHERE chunk_id = ANY(%s)", (old_md_ids,))
        assert (await cursor.fetchone())[0] == 0
    await embedder.aclose()


async def test_switching_the_embedding_model_reembeds_without_rechunking(
    db: Database, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    docs = make_docs(tmp_path / "docs")
    first_model = OpenAIEmbeddings(base_url=openai_emulator.base_url, api_key="k", model="model-a")
    await ingest(db, IngestRequest(source="docs", exposure="prefetch", targets=[str(docs)]), embedder=first_model)
    ids = await chunk_ids(db, "")
    second_model = OpenAIEmbeddings(base_url=openai_emulator.base_url, api_key="k", model="model-b")
    switched = await ingest(
        db, IngestRequest(source="docs", exposure="prefetch", targets=[str(docs)]),
        embedder=second_model,
    )
    assert (switched.updated, switched.unchanged, switched.chunks, switched.embeddings) == (3, 0, 0, len(ids))
    assert await chunk_ids(db, "") == ids
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT DISTINCT model FROM chunk_embeddings")
        assert [row[0] for row in await cursor.fetchall()] == ["openai:model-b"]
    hits = await PgRetriever(db, second_model).search_chunks("quartermaster laptop", limit=1)
    assert hits[0].uri.endswith("onboarding.html")
    await first_model.aclose()
    await second_model.aclose()


async def test_prune_removes_documents_whose_files_are_gone(db: Database, tmp_path: Path) -> None:
    docs = make_docs(tmp_path / "docs")
    await ingest(db, IngestRequest(source="docs", exposure="prefetch", targets=[str(docs)]), embedder=None)
    (docs / "handbook.pdf").unlink()
    kept = await ingest(db, IngestRequest(source="docs", exposure="prefetch", targets=[str(docs)]), embedder=None)
    assert kept.removed == 0 and await chunk_ids(db, "handbook.pdf")
    pruned = await ingest(
        db, IngestRequest(source="docs", exposure="prefetch", targets=[str(docs)], prune=True),
        embedder=None,
    )
    assert pruned.removed == 1 and pruned.unchanged == 2
    assert not await chunk_ids(db, "handbook.pdf")

    # A missing target must not be read as "every document is gone".
    missing = await ingest(
        db, IngestRequest(source="docs", exposure="prefetch", targets=[str(tmp_path / "nowhere")], prune=True),
        embedder=None,
    )
    assert missing.removed == 0
    assert ("--prune", "nothing was removed because a target could not be found") in missing.skipped
    assert await chunk_ids(db, "backups.md")


async def test_without_embeddings_search_is_lexical_and_filters_by_source_and_exposure(
    db: Database, tmp_path: Path
) -> None:
    docs = make_docs(tmp_path / "docs")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "oncall.md").write_text("# On-call\n\nThe pager rotation changes on Mondays; the quartermaster swaps too.\n")
    summary = await ingest(db, IngestRequest(source="docs", exposure="prefetch", targets=[str(docs)]), embedder=None)
    assert summary.embeddings == 0 and summary.added == 3
    await ingest(db, IngestRequest(source="notes", exposure="agentic_tool", targets=[str(notes)]), embedder=None)
    retriever = PgRetriever(db, None)

    exact = await retriever.search("zephyrine bucket", limit=5)
    assert exact[0].uri.endswith("backups.md") and "Backups" in exact[0].title
    assert {item.source for item in await retriever.search("quartermaster", limit=5)} == {"docs", "notes"}
    assert {item.source for item in await retriever.search("quartermaster", limit=5, exposure="prefetch")} == {"docs"}
    assert {item.source for item in await retriever.search("quartermaster", limit=5, sources=["notes"])} == {"notes"}
    assert await retriever.has_sources("agentic_tool") and await retriever.has_sources("prefetch")

    await ingest(db, IngestRequest(source="notes", exposure="off", targets=[str(notes)]), embedder=None)
    assert {item.source for item in await retriever.search("quartermaster", limit=5)} == {"docs"}
    assert not await retriever.has_sources("agentic_tool")
    sources = {row.name: row for row in await list_sources(db)}
    assert sources["notes"].exposure == "off" and sources["docs"].documents == 3
    assert await remove_source(db, "notes") and not await remove_source(db, "notes")


async def test_limit_and_token_budget_are_honoured(db: Database, tmp_path: Path) -> None:
    root = tmp_path / "many"
    root.mkdir()
    for index in range(6):
        body = " ".join(["widget calibration"] * (10 + 20 * index))
        (root / f"doc{index}.md").write_text(f"# Doc {index}\n\n{body}\n")
    await ingest(db, IngestRequest(source="many", exposure="prefetch", targets=[str(root)]), embedder=None)
    retriever = PgRetriever(db, None)
    assert len(await retriever.search("widget calibration", limit=2)) == 2
    everything = await retriever.search_chunks("widget calibration", limit=10)
    budget = sorted(hit.token_count for hit in everything)[1] + 1
    within = await retriever.search_chunks("widget calibration", limit=10, token_budget=budget)
    assert within and sum(hit.token_count for hit in within) <= budget
    assert len(within) < len(everything)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1/notes.md", "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/wiki", "http://localhost/x"],
)
async def test_private_urls_are_skipped_with_a_reason_and_the_run_goes_on(
    db: Database, tmp_path: Path, url: str
) -> None:
    docs = make_docs(tmp_path / "docs")
    summary = await ingest(
        db, IngestRequest(source="mixed", exposure="prefetch", targets=[url, str(docs)]),
        embedder=None,
    )
    assert summary.added == 3
    reasons = dict(summary.skipped)
    assert "Refused to fetch" in reasons[url] and "address" in reasons[url]


def test_an_ingest_request_is_one_value_checked_when_it_is_made(tmp_path: Path) -> None:
    request = IngestRequest(source="docs", exposure="prefetch", targets=[str(tmp_path)], include=["*.md"])
    assert request.targets == (str(tmp_path),) and request.include == ("*.md",)  # kept as given then
    assert request.link_root == str(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.prune = True  # type: ignore[misc]
    with pytest.raises(ValueError, match="needs a name"):
        IngestRequest(source="  ", exposure="prefetch", targets=[str(tmp_path)])
    with pytest.raises(ValueError, match="Nothing to ingest"):
        IngestRequest(source="docs", exposure="prefetch")
    with pytest.raises(LinkBaseError, match="no target is a file or folder"):
        IngestRequest(source="web", exposure="prefetch", targets=["https://example.com/"], link_base="https://wiki.example.com/")
    linked = IngestRequest(source="docs", exposure="prefetch", targets=[str(tmp_path)], link_base="https://wiki.example.com/docs")
    assert linked.link_base == check_link_base("https://wiki.example.com/docs")


def test_ingest_takes_what_to_do_as_one_request_and_its_surroundings_apart() -> None:
    # What to ingest travels as one IngestRequest; the embedder, the fetch limits and progress are the caller's.
    assert list(inspect.signature(ingest).parameters) == ["db", "request", "embedder", "fetch", "progress"]
