"""Quotas hold across processes: two API servers, each with its own engine and connection pool, one database."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from core.store.db import Database
from tests.adapters.api.harness import auth, serve_api
from tests.emulators.openai_server import OpenAIEmulator


async def test_twenty_concurrent_requests_over_two_servers_take_exactly_ten(
    db: Database, database_url: str, tmp_path: Path, openai_emulator: OpenAIEmulator
) -> None:
    other_db = Database(url=database_url, data_dir=tmp_path / "second")
    await other_db.open()
    try:
        async with serve_api(db, openai_emulator.base_url) as first, serve_api(other_db, openai_emulator.base_url) as second, \
                aiohttp.ClientSession() as http:
            _, secret = await first.keys.create("ten", requests_per_day=10)

            async def ask(url: str, n: int) -> tuple[int, dict]:
                async with http.post(f"{url}/api/answer", json={"question": f"q{n}"}, headers=auth(secret)) as response:
                    return response.status, await response.json()

            results = await asyncio.gather(*(ask((first, second)[n % 2].url, n) for n in range(20)))
            statuses = [status for status, _ in results]
            assert statuses.count(200) == 10 and statuses.count(429) == 10
            refusal = next(body for status, body in results if status == 429)["error"]
            assert refusal["limit"] == "requests_per_day" and refusal["resets_at"]
            assert len(openai_emulator.chat_requests) == 10
    finally:
        await other_db.close()
