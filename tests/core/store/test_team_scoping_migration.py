"""Migration 027: today's rows stay valid — every source becomes the deployment's (searched as before), and every
stored vote learns the workspace of the conversation its turn is in."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import psycopg

from core.store.migrations import MIGRATIONS_DIR, apply_migrations

NAME = "027_team_scoping.sql"


async def test_stored_sources_become_the_deployments_and_votes_learn_their_workspace(pg_server: str, tmp_path: Path) -> None:
    name = "t_team_scoping_migration"
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
    voted, orphan = uuid.uuid4(), uuid.uuid4()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO sources (name) VALUES ('handbook')")
        [(conversation,)] = conn.execute(
            "INSERT INTO conversations (platform, workspace, channel) VALUES ('slack', 'T1', 'C1') RETURNING id").fetchall()
        conn.execute("INSERT INTO messages (conversation_id, turn_id, role) VALUES (%s, %s, 'user'), (%s, %s, 'assistant')",
                     (conversation, voted, conversation, voted))
        for turn in (voted, orphan):  # a vote whose turn is gone stays, with no workspace to learn
            conn.execute("INSERT INTO feedback (turn_id, user_id, platform, vote) VALUES (%s, 'U1', 'slack', 1)", (turn,))
    assert NAME in await apply_migrations(url)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT name, owner FROM sources").fetchall() == [("handbook", "")]
        assert dict(conn.execute("SELECT turn_id, workspace FROM feedback").fetchall()) == {voted: "T1", orphan: ""}
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
