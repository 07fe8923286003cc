"""/readyz notes (issue 25): what is wrong with some teams only is shown by platform and team, and never makes the
process unready; notes that cannot be read are left out, readiness unchanged."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping

import aiohttp
import pytest

from adapters.http.server import HttpServer


@pytest.fixture
async def http() -> AsyncIterator[HttpServer]:
    server = HttpServer(host="127.0.0.1", port=0)
    await server.start()
    yield server
    await server.stop()


async def readyz(server: HttpServer) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{server.port}/readyz") as response:
            return response.status, json.loads(await response.text())


async def test_a_teams_note_is_shown_without_failing_readiness_and_beside_the_reasons_when_unready(
    http: HttpServer,
) -> None:
    notes: dict[str, str] = {}
    database: list[str | None] = [None]

    async def slack_notes() -> Mapping[str, str]:
        return notes

    async def broken_notes() -> Mapping[str, str]:
        raise RuntimeError("the installs cannot be read")

    async def database_check() -> str | None:
        return database[0]

    http.add_readiness_check("database", database_check)
    http.add_readiness_notes("slack", slack_notes)
    http.add_readiness_notes("other", broken_notes)
    assert await readyz(http) == (200, {"status": "ready"})
    notes["T1"] = "token refresh failing (invalid_refresh_token)"
    assert await readyz(http) == (200, {"status": "ready", "notes": {"slack": {"T1": notes["T1"]}}})
    database[0] = "the database does not answer"
    assert await readyz(http) == (503, {"status": "not ready", "reasons": {"database": "the database does not answer"},
                                        "notes": {"slack": {"T1": notes["T1"]}}})
