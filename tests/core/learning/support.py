"""What the learning tests share: settings, a service over the test database, and reads of what is indexed."""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator

from core.learning.documents import build_document
from core.learning.indexer import fallback_uri
from core.learning.model import ChannelPlace
from core.learning.service import ChannelLearningService
from core.retrieval.embeddings import EmbeddingProvider
from core.store import learned_channels as store
from core.store.db import Database

PLACE = ChannelPlace(platform="slack", workspace="T1", channel="C1")


@dataclass(frozen=True)
class LearnSettings:
    learn_since_days: int = 90
    learn_rescan_days: int = 7
    learn_stretch_messages: int = 4


@asynccontextmanager
async def service(db: Database, *, embedder: EmbeddingProvider | None = None, stretch: int = 4,
                  **options: object) -> AsyncIterator[ChannelLearningService]:
    made = ChannelLearningService(db, embedder=embedder, settings=LearnSettings(learn_stretch_messages=stretch),
                                  **options)  # type: ignore[arg-type]
    try:
        yield made
    finally:
        await made.close()


async def indexed(db: Database) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """Every channel document indexed: key → (title, uri, its chunks' texts in order)."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT d.channel_document, d.title, d.uri, array_agg(c.text ORDER BY c.ord) FROM documents d"
            " JOIN chunks c ON c.document_id = d.id WHERE d.channel_document IS NOT NULL"
            " GROUP BY d.channel_document, d.title, d.uri"
        )
        return {row[0]: (row[1], row[2], tuple(row[3])) for row in await cursor.fetchall()}


async def rebuilt_from_scratch(db: Database) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """What the index should hold: every stored message's document built again from the rows alone."""
    expected = {}
    for channel in await store.list_channels(db):
        async with db.connection() as conn:
            keys = {row[0] for row in await (await conn.execute(
                "SELECT DISTINCT document FROM channel_messages WHERE source_id = %s", (channel.source_id,))).fetchall()}
            for key in keys:
                rows = await store.document_messages(conn, channel.source_id, key)
                document = build_document(key, [r.message for r in rows], channel_name=channel.name,
                                          fallback_uri=fallback_uri(channel, key))
                if document is not None:
                    expected[key] = (document.title, document.uri, tuple(c.text for c in document.chunks))
    return expected


async def stored_ids(db: Database) -> list[str]:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT id FROM channel_messages ORDER BY id")
        return [row[0] for row in await cursor.fetchall()]
