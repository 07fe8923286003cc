"""What one ingest does to a source's documents: decide per document, embed in batches, write each whole."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal


from core.retrieval.chunking import Chunk, chunk_document
from core.retrieval.embeddings import EmbeddingError, EmbeddingProvider
from core.retrieval.loaders import LoadedDocument
from core.retrieval.store import ensure_vector_index, insert_chunks, insert_vectors
from core.store.db import Database
from core.text_safety import storable

log = logging.getLogger(__name__)

# Chunks gathered across documents before one embedding call: fewer calls, same vectors.
EMBED_BATCH_CHUNKS = 64
# The local MiniLM model reads only the first 256 word pieces of a text; chunks about that long are
# embedded whole (and cite more precisely than longer ones).
CHUNK_MAX_TOKENS = 256
CHUNK_OVERLAP_TOKENS = 32


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


class IndexRun:
    """One ingest's work on a source's documents, and its running totals."""

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
                if vectors:
                    await insert_vectors(conn, source_id=self.source_id, chunk_ids=item.chunk_ids, vectors=vectors,
                                         model=model)
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
                await insert_chunks(conn, document_id=document_id, source_id=self.source_id, chunks=item.chunks,
                                    vectors=vectors, model=model)
                self.chunks += len(item.chunks)
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
