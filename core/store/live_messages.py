"""Answer messages still streaming, recorded so that a crash never leaves one at "thinking…"."""

from __future__ import annotations

from core.ports import LiveMessage
from core.store.db import Database


class LiveMessages:
    """Implements core.ports.LiveAnswerLog. Adapters add a message when they post it and remove it once its final text is delivered."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, message: LiveMessage) -> None:
        async with self._db.connection() as conn:
            await conn.execute(
                "INSERT INTO live_messages (platform, workspace, channel, message_id, thread) VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                (message.platform, message.workspace, message.channel, message.message_id, message.thread),
            )

    async def remove(self, *, platform: str, channel: str, message_id: str) -> None:
        async with self._db.connection() as conn:
            await conn.execute(
                "DELETE FROM live_messages WHERE platform = %s AND channel = %s AND message_id = %s",
                (platform, channel, message_id),
            )

    async def take_all(self, platform: str) -> list[LiveMessage]:
        """Remove and return every live message of a platform (at startup, to mark them interrupted)."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM live_messages WHERE platform = %s RETURNING platform, workspace, channel, message_id, thread",
                (platform,),
            )
            rows = await cursor.fetchall()
        return [
            LiveMessage(platform=row[0], workspace=row[1], channel=row[2], message_id=row[3], thread=row[4]) for row in rows
        ]
