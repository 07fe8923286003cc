"""What learning from channels left in Postgres, as the e2e tests of both platforms read it."""

from __future__ import annotations

import asyncio

from core.learning.model import ChannelPlace
from core.learning.service import ChannelLearningService
from core.store.db import Database


async def learn(service: ChannelLearningService, where: ChannelPlace, *, since_days: int = 90) -> None:
    """Chosen, then backfilled until live (the runtime's job, run here until done)."""
    await service.add(where, since_days=since_days, keep_days=None)
    for _ in range(300):
        await service.run_due()
        learned = await service.get(where)
        if learned is not None and learned.state == "live":
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not live: {await service.get(where)}")


async def stored(db: Database, source: str) -> list[str]:
    """The ids of the messages stored for one learned channel's source, in order."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT m.id FROM channel_messages m JOIN sources s ON s.id = m.source_id WHERE s.name = %s ORDER BY m.id",
            (source,))
        return [str(row[0]) for row in await cursor.fetchall()]


async def indexed_texts(db: Database) -> list[str]:
    """Every chunk's text of every learned channel's documents."""
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT text FROM chunks c JOIN documents d ON d.id = c.document_id"
                                    " WHERE d.channel_document IS NOT NULL")
        return [str(row[0]) for row in await cursor.fetchall()]
