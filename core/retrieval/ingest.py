"""Ingest files, folders and URLs into a source: load, chunk, embed, and replace changed documents whole."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from pgvector import Vector

from core.retrieval.chunking import Chunk, chunk_document
from core.retrieval.embeddings import EmbeddingError, EmbeddingProvider
from core.retrieval.links import LinkBaseError, check_link_base, link_root
from core.retrieval.crawl import CrawlOptions, CrawlRootError, CrawlSkip, FetchPolicy, crawl as crawl_site
from core.retrieval.loaders import LoadedDocument, Skipped, iter_path, load_url
from core.retrieval.source_lease import SourceLease
from core.retrieval.store import SourceExposure, SourceKind, ensure_vector_index, upsert_source
from core.retrieval.targets import SourceTarget, build_targets, is_url, remember_targets
from core.retrieval.url_guard import FetchError
from core.store.db import Database
from core.text_safety import storable

log = logging.getLogger(__name__)

# Chunks gathered across documents before one embedding call: fewer calls, same vectors.
EMBED_BATCH_CHUNKS = 64
# The local MiniLM model reads only the first 256 word pieces of a text; chunks about that long are
# embedded whole (and cite more precisely than longer ones).
CHUNK_MAX_TOKENS = 256
CHUNK_OVERLAP_TOKENS = 32
URL_TIMEOUT_S = 20.0


@dataclass(frozen=True, kw_only=True)
class IngestProgress:
    """Running totals, reported after each document and each embedding batch."""

    documents: int
    chunks: int
    embeddings: int
    current: str = ""


ProgressCallback = Callable[[IngestProgress], None]


@dataclass(frozen=True, kw_only=True)
class IngestSummary:
    """What one ingest run did; skipped pairs a uri (or target) with the reason in words."""

    added: int
    updated: int
    unchanged: int
    skipped: tuple[tuple[str, str], ...]
    removed: int
    chunks: int
    embeddings: int
    # Targets whose root (folder, URL, start page, sitemap) could not be reached, with why: nothing was pruned.
    unreachable: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True)
class _Known:
    id: int
    content_hash: str
    embedding_model: str | None
    embedding_dim: int | None


@dataclass(kw_only=True)
class _Pending:
    """A document waiting for its vectors: new or changed (chunks), or only re-embedded (chunk_ids)."""

    document: LoadedDocument
    texts: list[str]
    chunks: list[Chunk] = field(default_factory=list)
    chunk_ids: list[int] = field(default_factory=list)
    action: Literal["added", "updated", "reembedded"] = "added"


def _source_kind(targets: Sequence[str]) -> SourceKind:
    urls = sum(1 for target in targets if is_url(target))
    if urls == 0:
        return "files"
    return "urls" if urls == len(targets) else "mixed"


def _storable(document: LoadedDocument) -> LoadedDocument:
    """The document as Postgres can store it: a page or file may hold NUL, and a file name that is not UTF-8 comes
    with lone surrogates (Python's surrogateescape) in its uri and title."""
    uri, title, text = storable(document.uri), storable(document.title), storable(document.text)
    if (uri, title, text) == (document.uri, document.title, document.text):
        return document
    return replace(document, uri=uri, title=title, text=text)


def _chunk(document: LoadedDocument) -> list[Chunk]:
    return chunk_document(
        document.text, title=document.title, max_tokens=CHUNK_MAX_TOKENS, overlap_tokens=CHUNK_OVERLAP_TOKENS
    )


class _Ingestion:
    def __init__(
        self, db: Database, *, source_id: int, embedder: EmbeddingProvider | None, progress: ProgressCallback | None
    ) -> None:
        self.db = db
        self.source_id = source_id
        self.embedder = embedder
        self.progress = progress
        self.known: dict[str, _Known] = {}
        self.seen: set[str] = set()
        self.pending: list[_Pending] = []
        self.indexed_dims: set[int] = set()
        self.added = self.updated = self.unchanged = self.removed = self.chunks = self.embeddings = 0
        self.documents = 0
        self.skipped: list[tuple[str, str]] = []
        self.unreachable: list[tuple[str, str]] = []

    async def load_known(self) -> None:
        async with self.db.connection() as conn:
            cursor = await conn.execute(
                "SELECT id, uri, content_hash, embedding_model, embedding_dim FROM documents WHERE source_id = %s",
                (self.source_id,),
            )
            for doc_id, uri, content_hash, model, dim in await cursor.fetchall():
                self.known[uri] = _Known(id=doc_id, content_hash=content_hash, embedding_model=model, embedding_dim=dim)

    def report(self, current: str = "") -> None:
        if self.progress is not None:
            self.progress(
                IngestProgress(documents=self.documents, chunks=self.chunks, embeddings=self.embeddings, current=current)
            )

    def skip(self, uri: str, reason: str) -> None:
        self.skipped.append((uri, reason))
        self.documents += 1
        self.report(uri)

    def _embeddings_current(self, known: _Known) -> bool:
        if self.embedder is None:
            return True  # lexical-only runs leave any stored vectors alone
        if known.embedding_model != self.embedder.name:
            return False
        return not self.embedder.dimension or known.embedding_dim == self.embedder.dimension

    async def take(self, document: LoadedDocument) -> None:
        """Decide what a loaded document needs, and queue or write it."""
        document = _storable(document)
        self.seen.add(document.uri)
        known = self.known.get(document.uri)
        if known is not None and known.content_hash == document.content_hash:
            if self._embeddings_current(known):
                self.unchanged += 1
                self.documents += 1
                self.report(document.uri)
                return
            ids, texts = await self._stored_chunks(known.id)
            self.pending.append(_Pending(document=document, texts=texts, chunk_ids=ids, action="reembedded"))
        else:
            try:
                chunks = await asyncio.to_thread(_chunk, document)
            except ValueError as error:
                self.skip(document.uri, f"it could not be split into chunks ({error})")
                return
            if not chunks:
                self.skip(document.uri, "it has no text to index")
                return
            action: Literal["added", "updated"] = "added" if known is None else "updated"
            if self.embedder is None:
                await self._write(_Pending(document=document, texts=[], chunks=chunks, action=action), vectors=None)
                return
            self.pending.append(
                _Pending(document=document, texts=[c.contextual_text for c in chunks], chunks=chunks, action=action)
            )
        if sum(len(p.texts) for p in self.pending) >= EMBED_BATCH_CHUNKS:
            await self.flush()

    async def _stored_chunks(self, document_id: int) -> tuple[list[int], list[str]]:
        async with self.db.connection() as conn:
            cursor = await conn.execute(
                "SELECT id, title, heading_path, text, ord FROM chunks WHERE document_id = %s ORDER BY ord",
                (document_id,),
            )
            rows = await cursor.fetchall()
        ids = [row[0] for row in rows]
        texts = [
            Chunk(text=text, order=ord_, heading_path=tuple(path), token_count=0, title=title).contextual_text
            for _, title, path, text, ord_ in rows
        ]
        return ids, texts

    async def flush(self) -> None:
        """Embed every queued document (one call for all when possible), then write each in its own transaction."""
        pending, self.pending = self.pending, []
        if not pending or self.embedder is None:
            return
        try:
            vectors = await self.embedder.embed([text for item in pending for text in item.texts])
            per_document: list[tuple[_Pending, list[list[float]] | None]] = []
            offset = 0
            for item in pending:
                per_document.append((item, vectors[offset : offset + len(item.texts)]))
                offset += len(item.texts)
        except EmbeddingError as error:
            if len(pending) == 1:
                self.skip(pending[0].document.uri, f"it could not be embedded ({error})")
                return
            # One document may be what the API refuses: retry them one by one.
            log.warning("embedding a batch of %d documents failed (%s); retrying one by one", len(pending), error)
            for item in pending:
                self.pending = [item]
                await self.flush()
            return
        self.embeddings += sum(len(v or ()) for _, v in per_document)
        self.report()
        for item, item_vectors in per_document:
            await self._write(item, vectors=item_vectors)

    async def _ensure_index(self, dimension: int) -> None:
        assert self.embedder is not None
        if dimension not in self.indexed_dims:
            await ensure_vector_index(self.db, model=self.embedder.name, dimension=dimension)
            self.indexed_dims.add(dimension)

    async def _write(self, item: _Pending, *, vectors: list[list[float]] | None) -> None:
        """Replace the document's chunks and vectors in one transaction, so it is never half-ingested."""
        document = item.document
        model = self.embedder.name if (self.embedder is not None and vectors) else None
        dimension = len(vectors[0]) if vectors else None
        if dimension:
            await self._ensure_index(dimension)
        async with self.db.connection() as conn:
            if item.action == "reembedded":
                await conn.execute("DELETE FROM chunk_embeddings WHERE chunk_id = ANY(%s)", (item.chunk_ids,))
                await conn.execute(
                    "UPDATE documents SET embedding_model = %s, embedding_dim = %s, updated_at = now() "
                    "WHERE source_id = %s AND uri = %s",
                    (model, dimension, self.source_id, document.uri),
                )
                chunk_ids = item.chunk_ids
            else:
                cursor = await conn.execute(
                    "INSERT INTO documents (source_id, uri, title, content_hash, embedding_model, embedding_dim) "
                    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (source_id, uri) DO UPDATE SET "
                    " title = EXCLUDED.title, content_hash = EXCLUDED.content_hash,"
                    " embedding_model = EXCLUDED.embedding_model, embedding_dim = EXCLUDED.embedding_dim,"
                    " updated_at = now() RETURNING id",
                    (self.source_id, document.uri, document.title, document.content_hash, model, dimension),
                )
                row = await cursor.fetchone()
                assert row is not None
                document_id = int(row[0])
                await conn.execute("DELETE FROM chunks WHERE document_id = %s", (document_id,))
                async with conn.cursor() as cur:
                    await cur.executemany(
                        "INSERT INTO chunks (document_id, source_id, ord, text, heading_path, title, token_count) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id",
                        [
                            (document_id, self.source_id, c.order, c.text, list(c.heading_path), c.title, c.token_count)
                            for c in item.chunks
                        ],
                        returning=True,
                    )
                    chunk_ids = []
                    while True:
                        fetched = await cur.fetchone()
                        if fetched is not None:
                            chunk_ids.append(int(fetched[0]))
                        if not cur.nextset():
                            break
                self.chunks += len(item.chunks)
            if vectors:
                async with conn.cursor() as cur:
                    await cur.executemany(
                        "INSERT INTO chunk_embeddings (chunk_id, model, source_id, embedding) VALUES (%s, %s, %s, %s)",
                        [(cid, model, self.source_id, Vector(v)) for cid, v in zip(chunk_ids, vectors)],
                    )
        if item.action == "added":
            self.added += 1
        else:
            self.updated += 1
        self.documents += 1
        self.report(document.uri)

    async def prune(self) -> None:
        async with self.db.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM documents WHERE source_id = %s AND NOT (uri = ANY(%s)) RETURNING uri",
                (self.source_id, sorted(self.seen)),
            )
            self.removed = len(await cursor.fetchall())

    def summary(self) -> IngestSummary:
        return IngestSummary(
            added=self.added,
            updated=self.updated,
            unchanged=self.unchanged,
            skipped=tuple(self.skipped),
            removed=self.removed,
            chunks=self.chunks,
            embeddings=self.embeddings,
            unreachable=tuple(self.unreachable),
        )




class KeepInterval:
    """The default of ingest's sync_interval_s: leave the source's interval as it is."""


KEEP_INTERVAL = KeepInterval()


async def ingest(
    db: Database,
    targets: Sequence[str],
    *,
    source: str,
    exposure: SourceExposure,
    embedder: EmbeddingProvider | None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    prune: bool = False,
    allow_private: bool = False,
    allowed_networks: Sequence[str] = (),
    max_url_bytes: int = 5_000_000,
    progress: ProgressCallback | None = None,
    link_base: str | None = None,
    crawl: CrawlOptions | None = None,
    sitemaps: Sequence[str] = (),
    sitemap_options: CrawlOptions | None = None,
    sync_interval_s: int | None | KeepInterval = KEEP_INTERVAL,
) -> IngestSummary:
    """Ingest every target (file, folder or http(s) URL) into the named source.

    Unchanged documents cost nothing; a changed one has its chunks and vectors replaced in one
    transaction; a file that cannot be read is skipped with a reason and the run goes on. With
    prune, documents of the source that no target produced any more are deleted. With link_base, files
    are cited at link_base + their path under the targets' folder (core/retrieval/links.py). With crawl,
    URL targets are crawled on their site; sitemaps are crawled from the pages they list.

    The targets are remembered on the source (added to earlier ones; with prune, replacing them) for
    core/retrieval/sync.py; sync_interval_s sets how often it syncs (None: never; default: unchanged,
    or never for a new source). Raises SourceBusy while another process ingests or syncs the source.
    """
    if not source.strip():
        raise ValueError("A source needs a name.")
    if not targets and not sitemaps:
        raise ValueError("Nothing to ingest: name a file, folder, URL or sitemap.")
    if link_base is not None:
        link_base = check_link_base(link_base)
    root = link_root(targets)
    if link_base is not None and root is None:
        raise LinkBaseError("a link base maps files to web addresses, and no target is a file or folder")
    specs = build_targets(
        targets, include=include, exclude=exclude, crawl=crawl, sitemaps=sitemaps,
        sitemap_options=sitemap_options, allow_private=allow_private,
    )
    all_targets = [*targets, *sitemaps]
    async with db.connection() as conn:
        source_id = await upsert_source(
            conn, name=source, kind=_source_kind(all_targets), uri=" ".join(all_targets), exposure=exposure,
            link_base=link_base, link_root=root,
        )
    async with await SourceLease.take(db, source_id) as lease:
        async with db.connection() as conn:
            await remember_targets(conn, source_id, specs, replace=prune)
            if not isinstance(sync_interval_s, KeepInterval):
                await conn.execute(
                    "UPDATE sources SET sync_interval_s = %s WHERE id = %s", (sync_interval_s or None, source_id)
                )
        policy = FetchPolicy(allowed_networks=allowed_networks, max_url_bytes=max_url_bytes, timeout_s=URL_TIMEOUT_S)
        summary = await read_targets(
            db, source_id, specs, embedder=embedder, policy=policy, prune=prune, progress=progress
        )
        await lease.finish(error=unreachable_error(summary))
    return summary


def unreachable_error(summary: IngestSummary) -> str | None:
    """The sync's error when a root could not be reached, in one line for `sources list`."""
    if not summary.unreachable:
        return None
    return "; ".join(f"{target}: {reason}" for target, reason in summary.unreachable)


async def read_targets(
    db: Database,
    source_id: int,
    specs: Sequence[SourceTarget],
    *,
    embedder: EmbeddingProvider | None,
    policy: FetchPolicy,
    prune: bool,
    progress: ProgressCallback | None = None,
) -> IngestSummary:
    """Read every target into the source (the caller holds its lease); with prune, delete documents no target
    produced, unless a target's root (folder, URL, start page, sitemap, robots.txt) could not be reached."""
    run = _Ingestion(db, source_id=source_id, embedder=embedder, progress=progress)
    await run.load_known()
    for spec in specs:
        if spec.crawl is not None or spec.sitemap:
            await _read_crawl(run, spec, policy)
        elif is_url(spec.target):
            await _read_url(run, spec, policy)
        else:
            await _read_path(run, spec)
    await run.flush()
    if prune:
        if not run.unreachable:
            await run.prune()
        else:
            run.skipped.append(("--prune", "nothing was removed because a target could not be found"))
    run.report()
    return run.summary()


def _policy_for(spec: SourceTarget, policy: FetchPolicy) -> FetchPolicy:
    return replace(policy, allow_private=True) if spec.allow_private else policy


async def _read_url(run: _Ingestion, spec: SourceTarget, policy: FetchPolicy) -> None:
    policy = _policy_for(spec, policy)
    try:
        document = await load_url(
            spec.target,
            allow_private=policy.allow_private,
            allowed_networks=policy.allowed_networks,
            max_bytes=policy.max_url_bytes,
            timeout_s=policy.timeout_s,
        )
    except FetchError as error:
        run.seen.add(spec.target)  # a URL that fails today keeps yesterday's copy
        run.skip(spec.target, str(error))
        run.unreachable.append((spec.target, str(error)))
        return
    await run.take(document)


async def _read_crawl(run: _Ingestion, spec: SourceTarget, policy: FetchPolicy) -> None:
    try:
        async for item in crawl_site(
            spec.target, sitemap=spec.sitemap, options=spec.crawl or CrawlOptions(), policy=_policy_for(spec, policy)
        ):
            if isinstance(item, CrawlSkip):
                if item.keep:
                    run.seen.add(item.uri)  # it may still exist: keep yesterday's copy
                run.skip(item.uri, item.reason)
            else:
                await run.take(item)
    except CrawlRootError as error:
        run.skip(spec.target, str(error))
        run.unreachable.append((spec.target, str(error)))


async def _read_path(run: _Ingestion, spec: SourceTarget) -> None:
    path = Path(spec.target).expanduser()
    if not path.exists():
        run.skip(spec.target, "there is no such file or folder")
        run.unreachable.append((spec.target, "there is no such file or folder"))
        return
    documents = iter_path(path, include=spec.include, exclude=spec.exclude)
    while True:
        try:
            loaded = await asyncio.to_thread(next, documents, None)
        except OSError as error:  # the folder itself became unreadable mid-walk
            run.skip(spec.target, f"the folder could not be read ({error})")
            run.unreachable.append((spec.target, f"the folder could not be read ({error})"))
            return
        if loaded is None:
            return
        if isinstance(loaded, Skipped):
            run.seen.add(loaded.uri)
            run.skip(loaded.uri, loaded.reason)
        else:
            await run.take(loaded)
