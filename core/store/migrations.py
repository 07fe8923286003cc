"""Applies the numbered SQL files of the top-level migrations package in order, once each, under an advisory lock."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable

import psycopg

from core.redact import error_reason

log = logging.getLogger(__name__)

# Read as package data, so a wheel installed anywhere finds them.
MIGRATIONS_DIR: Traversable = files("migrations")
# Any constant works as long as every relaybot process uses the same one.
MIGRATION_LOCK_KEY = 0x72656C6179  # "relay"
MIGRATION_FILE = re.compile(r"^(\d{3,})_[\w-]+\.sql$")


class MigrationError(Exception):
    """A migration cannot be applied; the message says which file and why."""


@dataclass(frozen=True, kw_only=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def discover(directory: Traversable = MIGRATIONS_DIR) -> list[Migration]:
    """The migration files of a folder, in version order."""
    found = []
    for path in directory.iterdir():
        match = MIGRATION_FILE.match(path.name)
        if match:
            found.append(Migration(version=int(match.group(1)), name=path.name, sql=path.read_text("utf-8")))
    if not found:
        # An install that lost its package data would otherwise "apply 0 migrations" and run on no schema.
        raise MigrationError(f"No migration files were found in {directory}; the installation is incomplete.")
    found.sort(key=lambda migration: migration.version)
    versions = [migration.version for migration in found]
    if len(versions) != len(set(versions)):
        raise MigrationError(f"Two migration files in {directory} share a version number.")
    return found


async def apply_migrations(url: str, *, directory: Traversable = MIGRATIONS_DIR) -> list[str]:
    """Apply every migration not yet recorded; return the names applied by this call."""
    migrations = discover(directory)
    applied_now: list[str] = []
    try:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    except psycopg.Error as error:
        reason = error_reason(error, url=url)
        raise MigrationError(f"Cannot connect to the database to apply migrations ({reason}).") from None
    async with conn:
        await _require_pgvector(conn)
        await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cursor = await conn.execute("SELECT version, name, checksum FROM schema_migrations")
            recorded = {version: (name, checksum) for version, name, checksum in await cursor.fetchall()}
            for migration in migrations:
                if migration.version in recorded:
                    name, checksum = recorded[migration.version]
                    if checksum != migration.checksum:
                        raise MigrationError(
                            f"Migration {migration.name} was changed after it was applied (as {name}); "
                            "add a new numbered migration instead of editing an applied one."
                        )
                    continue
                try:
                    async with conn.transaction():
                        await conn.execute(migration.sql.encode("utf-8"))
                        await conn.execute(
                            "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                            (migration.version, migration.name, migration.checksum),
                        )
                except psycopg.Error as error:
                    reason = error_reason(error, url=url)
                    raise MigrationError(f"Migration {migration.name} failed and was rolled back ({reason}).") from None
                log.debug("applied migration %s", migration.name)
                applied_now.append(migration.name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    if applied_now:
        # One line, not one a migration: a first start applies them all.
        log.info("applied %d migration%s (%s)", len(applied_now), "" if len(applied_now) == 1 else "s",
                 applied_now[0] if len(applied_now) == 1 else f"{applied_now[0]} … {applied_now[-1]}")
    return applied_now


async def _require_pgvector(conn: psycopg.AsyncConnection) -> None:
    cursor = await conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    if await cursor.fetchone() is None:
        raise MigrationError(
            "This Postgres server has no pgvector extension (`vector`); install pgvector on it, "
            "or unset DATABASE_URL to use relaybot's embedded Postgres, which includes it."
        )
