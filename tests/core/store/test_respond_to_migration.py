"""Migration 025: stored channel rows written with followups_need_mention come out as respond_to, audited, and
resolve as they did before."""

from __future__ import annotations

import shutil
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

from core.store.migrations import MIGRATIONS_DIR, apply_migrations

NAME = "025_respond_to_rows.sql"


async def test_rows_with_the_older_field_are_rewritten_as_respond_to(pg_server: str, tmp_path: Path) -> None:
    name = "t_respond_to_migration"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = pg_server.replace("/postgres?", f"/{name}?")
    before = tmp_path / "migrations"
    before.mkdir()
    for migration in Path(str(MIGRATIONS_DIR)).glob("*.sql"):
        if migration.name < NAME:
            shutil.copy(migration, before / migration.name)
    await apply_migrations(url, directory=before)
    rows = {
        "slack:T1:C1": {"followups_need_mention": True, "model": "m"},
        "slack:T1:C2": {"followups_need_mention": False},
        "slack:T1:C3": {"followups_need_mention": True, "respond_to": "all"},
        "slack:T1:C4": {"model": "m"},
    }
    with psycopg.connect(url, autocommit=True) as conn:
        for scope, settings in rows.items():
            conn.execute("INSERT INTO channel_config (scope, settings, updated_by) VALUES (%s, %s, 'test')",
                         (scope, Jsonb(settings)))
    assert (await apply_migrations(url))[0] == NAME
    with psycopg.connect(url) as conn:
        stored = dict(conn.execute("SELECT scope, settings FROM channel_config").fetchall())
        audited = conn.execute("SELECT scope, after FROM config_audit ORDER BY scope").fetchall()
    assert stored == {
        "slack:T1:C1": {"respond_to": "mentions", "model": "m"},
        "slack:T1:C2": {"respond_to": "threads"},
        "slack:T1:C3": {"respond_to": "all"},
        "slack:T1:C4": {"model": "m"},
    }
    assert audited == [("slack:T1:C1", "mentions"), ("slack:T1:C2", "threads")]
