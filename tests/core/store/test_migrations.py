"""Migrations: applied once, in order, safely from two runners at once, changed files refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from core.store.migrations import MigrationError, apply_migrations, discover


async def test_applies_all_then_nothing(database_url: str) -> None:
    first = await apply_migrations(database_url)
    assert first == [migration.name for migration in discover()]
    assert await apply_migrations(database_url) == []


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
