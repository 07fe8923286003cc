"""One channel document written (or deleted) in the retrieval tables, exactly as its messages stand when it commits."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from psycopg import AsyncConnection

from core.learning.documents import ChannelDocument, build_document
from core.learning.model import ChannelMessage
from core.retrieval.embeddings import EmbeddingError, EmbeddingProvider
from core.retrieval.store import ensure_vector_index, insert_chunks
from core.store import learned_channels as store
from core.store.db import Database

log = logging.getLogger(__name__)

# A document whose messages changed between its read and its write is built again; past this, the next change
# (which rebuilds it too) has the last word.
WRITE_ATTEMPTS = 4

Permalinker = Callable[[store.ChannelRow, ChannelMessage], Awaitable[str]]


def fingerprint(rows: Sequence[store.StoredMessage]) -> str:
    """What a document is built from, as one hash: equal fingerprints build equal documents."""
    digest = hashlib.sha256()
    for row in rows:
        m = row.message
        for part in (m.id, m.author_name, m.author_id, m.text, m.at.isoformat(), "\x1f".join(m.files), m.permalink,
                     "b" if m.never_learned else ""):
            digest.update(part.encode("utf-8", "surrogatepass") + b"\x00")
    return digest.hexdigest()


def fallback_uri(channel: store.ChannelRow, key: str) -> str:
    """A document's address while its first message has no permalink: shown as a plain title, never a link."""
    return f"{store.source_name(channel.place)}/{key}"


class ChannelIndexer:
    """Builds a channel document from its stored messages, embeds it off the event loop, and writes it whole."""

    def __init__(self, db: Database, *, embedder: EmbeddingProvider | None, permalink: Permalinker | None = None) -> None:
        self.db = db
        self.embedder = embedder
        self.permalink = permalink
        self.writes = 0  # documents written or deleted (a rebuild that found nothing changed writes nothing)
        self._indexed_dims: set[int] = set()

    async def rebuild(self, source_id: int, key: str) -> None:
        """Make the stored document `key` of the source match its messages (gone when none is learned from)."""
        for _ in range(WRITE_ATTEMPTS):
            async with self.db.connection() as conn:
                channel = await store.channel_of(conn, source_id)
                if channel is None:
                    return  # removed meanwhile: its documents went with its source
                rows = await store.document_messages(conn, source_id, key)
                stored = await _stored_document(conn, source_id, key)
            if await self._resolve_permalink(channel, rows):
                continue
            messages = [row.message for row in rows]
            document = await asyncio.to_thread(
                build_document, key, messages, channel_name=channel.name, fallback_uri=fallback_uri(channel, key)
            )
            if self._current(document, stored):
                return
            vectors = await self._embed(document)
            if await self._write(source_id, key, fingerprint(rows), document, vectors):
                return
        log.warning("document %s of source %s kept changing while it was written; the next change rebuilds it",
                    key, source_id)

    async def _resolve_permalink(self, channel: store.ChannelRow, rows: Sequence[store.StoredMessage]) -> bool:
        """Ask the platform for the first learned message's link when history did not carry one; True when stored."""
        first = next(
            (r.message for r in rows if not r.message.never_learned and (r.message.text.strip() or r.message.files)), None
        )
        if first is None or first.permalink or self.permalink is None:
            return False
        try:
            link = await self.permalink(channel, first)
        except Exception as error:  # noqa: BLE001 — the document is cited by its plain title meanwhile
            log.warning("no permalink for a message of %s (%s)", channel.place.key, type(error).__name__)
            return False
        if not link:
            return False
        await store.set_permalink(self.db, channel.source_id, first.id, link)
        return True

    def _current(self, document: ChannelDocument | None, stored: tuple[str, str | None] | None) -> bool:
        if document is None:
            return stored is None
        if stored is None or stored[0] != document.content_hash:
            return False
        return self.embedder is None or stored[1] == self.embedder.name

    async def _embed(self, document: ChannelDocument | None) -> list[list[float]] | None:
        if document is None or self.embedder is None:
            return None
        try:
            vectors = await self.embedder.embed([chunk.contextual_text for chunk in document.chunks])
        except EmbeddingError as error:
            # Still found by its words meanwhile; the next rebuild sees no vectors of this model and embeds again.
            log.warning("embedding a channel document failed, indexed by its words only: %s", error)
            return None
        if vectors and len(vectors[0]) not in self._indexed_dims:
            await ensure_vector_index(self.db, model=self.embedder.name, dimension=len(vectors[0]))
            self._indexed_dims.add(len(vectors[0]))
        return vectors

    async def _write(
        self, source_id: int, key: str, expected: str, document: ChannelDocument | None,
        vectors: list[list[float]] | None,
    ) -> bool:
        """Replace the document in one transaction, under its lock, if its messages are still what it was built
        from; False when they changed meanwhile (build it again)."""
        async with self.db.connection() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"learned:{source_id}:{key}",))
            if fingerprint(await store.document_messages(conn, source_id, key)) != expected:
                return False
            if document is None:
                await conn.execute(
                    "DELETE FROM documents WHERE source_id = %s AND channel_document = %s", (source_id, key)
                )
            else:
                # Its uri may be another document's of the source until that one is rebuilt (a root that got
                # replies): both replace it, and under their own keys' locks alone they would insert it twice.
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"learned:{source_id}:uri:{document.uri}",)
                )
                await _insert(conn, source_id, document, vectors, self.embedder.name if self.embedder else None)
        self.writes += 1
        return True


async def _stored_document(conn: AsyncConnection, source_id: int, key: str) -> tuple[str, str | None] | None:
    cursor = await conn.execute(
        "SELECT content_hash, embedding_model FROM documents WHERE source_id = %s AND channel_document = %s",
        (source_id, key),
    )
    row = await cursor.fetchone()
    return None if row is None else (row[0], row[1])


async def _insert(
    conn: AsyncConnection, source_id: int, document: ChannelDocument, vectors: list[list[float]] | None,
    model: str | None,
) -> None:
    """The document, its chunks and their vectors. A document of the source with the same uri is one whose first
    message moved here (a root that got replies): it is rebuilt by the same change, so it gives its place up."""
    model = model if vectors else None
    await conn.execute(
        "DELETE FROM documents WHERE source_id = %s AND (channel_document = %s OR uri = %s)",
        (source_id, document.key, document.uri),
    )
    cursor = await conn.execute(
        "INSERT INTO documents (source_id, uri, title, content_hash, embedding_model, embedding_dim, channel_document)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id",
        (source_id, document.uri, document.title, document.content_hash, model,
         len(vectors[0]) if vectors else None, document.key),
    )
    row = await cursor.fetchone()
    assert row is not None
    await insert_chunks(conn, document_id=row[0], source_id=source_id, chunks=document.chunks, vectors=vectors, model=model)
