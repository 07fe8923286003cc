"""Small facts a process remembers across restarts, by key (implements core.ports.AppState)."""

from __future__ import annotations

from core.store.db import Database


class AppStateStore:
    """One row per key; the last write wins."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def get(self, key: str) -> str | None:
        async with self._db.connection() as conn:
            cursor = await conn.execute("SELECT value FROM app_state WHERE key = %s", (key,))
            row = await cursor.fetchone()
        return str(row[0]) if row else None

    async def put(self, key: str, value: str) -> None:
        async with self._db.connection() as conn:
            await conn.execute(
                "INSERT INTO app_state (key, value) VALUES (%s, %s)"
                " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
                (key, value),
            )

    async def forget(self, prefix: str, *, older_than_s: float) -> int:
        """Removes the rows whose key starts with `prefix` last written over `older_than_s` ago; how many."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM app_state WHERE starts_with(key, %s) AND updated_at < now() - make_interval(secs => %s)",
                (prefix, older_than_s),
            )
            return cursor.rowcount
