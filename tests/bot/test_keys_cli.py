"""`relaybot keys`: create prints the secret once, list shows limits and use, revoke ends the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli import build_parser
from bot.keys_cli import keys
from core.store.api_keys import ApiKeyStore
from core.store.db import Database
from tests.support.engine import test_settings as make_settings


async def test_create_list_revoke(database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=tmp_path)

    async def run(*argv: str) -> int:
        return await keys(settings, build_parser().parse_args(["keys", *argv]))

    assert await run("create", "ci", "--requests-per-day", "10", "--sources", "handbook") == 0
    secret = capsys.readouterr().out.strip().splitlines()[-1]
    assert secret.startswith("rb-")
    assert await run("create", "ci") == 1
    assert await run("list") == 0
    listing = capsys.readouterr().out
    assert "ci" in listing and "handbook" in listing and "0/10" in listing and secret not in listing
    db = Database(url=database_url, data_dir=tmp_path)
    await db.open()
    try:
        store = ApiKeyStore(db)
        assert (await store.authenticate(secret)) is not None
        assert await run("revoke", "ci") == 0
        assert (await store.authenticate(secret)) is None
        assert await run("revoke", "ci") == 1
    finally:
        await db.close()
