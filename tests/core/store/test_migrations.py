"""Migrations: applied once, in order, safely from two runners at once, changed files refused; failures are sentences without the password."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import psycopg
import pytest

from core.store.db import Database, DatabaseError
from core.store.migrations import MigrationError, apply_migrations, discover


async def test_applies_all_then_nothing(database_url: str) -> None:
    first = await apply_migrations(database_url)
    assert first == [migration.name for migration in discover()]
    assert await apply_migrations(database_url) == []


async def test_a_first_start_says_in_one_line_what_it_applied(
    pg_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = "t_migrations_one_line"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    names = [migration.name for migration in discover()]
    with caplog.at_level(logging.INFO, logger="core.store.migrations"):
        await apply_migrations(pg_server.replace("/postgres?", f"/{name}?"))
    said = [record.getMessage() for record in caplog.records if record.levelno >= logging.INFO]
    assert said == [f"applied {len(names)} migrations ({names[0]} … {names[-1]})"]


async def test_two_concurrent_runners_apply_once(pg_server: str, tmp_path: Path) -> None:
    name = "t_concurrent_migrations"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = pg_server.replace("/postgres?", f"/{name}?")
    results = await asyncio.gather(apply_migrations(url), apply_migrations(url))
    names = [migration.name for migration in discover()]
    assert sorted(results, key=len) == [[], names]
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT count(*) FROM schema_migrations").fetchone()
    assert rows == (len(names),)


async def test_changed_applied_file_is_refused(database_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "900_probe.sql").write_text("CREATE TABLE probe_900 (id int);")
    assert await apply_migrations(database_url, directory=folder) == ["900_probe.sql"]
    (folder / "900_probe.sql").write_text("CREATE TABLE probe_900 (id bigint);")
    with pytest.raises(MigrationError, match="900_probe.sql was changed"):
        await apply_migrations(database_url, directory=folder)


def _refused_url() -> str:
    """A Postgres URL with a password, at a loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"postgresql://app:pw-very-secret@127.0.0.1:{port}/app?sslpassword=ssl-very-secret"


async def test_unreachable_database_is_a_sentence_without_the_password(tmp_path: Path) -> None:
    url = _refused_url()
    with pytest.raises(MigrationError) as migrating:
        await apply_migrations(url)
    db = Database(url=url, data_dir=tmp_path)
    with pytest.raises(DatabaseError) as opening:
        await db.open()
    await db.close()
    assert "Cannot connect to the database to apply migrations" in str(migrating.value)
    assert str(opening.value).startswith("Cannot connect to Postgres at postgresql://***@127.0.0.1:")
    assert "sslpassword=***" in str(opening.value) and "Connection refused" in str(opening.value)
    for error in (migrating.value, opening.value):
        assert "very-secret" not in str(error) and "\n" not in str(error)
        assert error.__suppress_context__


async def test_failing_migration_names_its_file_and_is_rolled_back(database_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "901_broken.sql").write_text("CREATE TABLE probe_901 (id int); SELECT no_such_column FROM probe_901;")
    with pytest.raises(MigrationError, match=r"^Migration 901_broken.sql failed and was rolled back \(.*no_such_column"):
        await apply_migrations(database_url, directory=folder)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT to_regclass('probe_901')").fetchone() == (None,)
