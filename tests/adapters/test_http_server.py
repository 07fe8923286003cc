"""/healthz is liveness, /readyz every readiness check (503 with reasons), /metrics Prometheus text behind an optional token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from adapters.http import server as server_module
from adapters.http.server import HttpServer
from core import metrics

TOKEN = "metrics-token-SECRET"


@pytest.fixture
async def http() -> AsyncIterator[HttpServer]:
    server = HttpServer(host="127.0.0.1", port=0, metrics_token=TOKEN)
    await server.start()
    yield server
    await server.stop()


async def get(server: HttpServer, path: str, **headers: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{server.port}{path}", headers=headers) as response:
            return response.status, response.headers.get("Content-Type", ""), await response.text()


async def test_readyz_names_every_check_that_fails_and_turns_ready_when_they_pass(http: HttpServer) -> None:
    problems: dict[str, str | None] = {"database": "the database does not answer (OperationalError)", "slack": None}

    def check(name: str):  # type: ignore[no-untyped-def]
        async def run() -> str | None:
            return problems[name]
        return run

    for name in problems:
        http.add_readiness_check(name, check(name))
    status, _, body = await get(http, "/readyz")
    assert status == 503
    assert '"database": "the database does not answer (OperationalError)"' in body and "slack" not in body
    problems["database"] = None
    status, _, body = await get(http, "/readyz")
    assert (status, body) == (200, '{"status": "ready"}')
    assert (await get(http, "/healthz"))[0] == 200
    http.mark_stopping()
    assert (await get(http, "/readyz"))[0] == 503
    assert (await get(http, "/healthz"))[0] == 503


async def test_a_check_that_does_not_answer_is_not_ready(http: HttpServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "READY_CHECK_TIMEOUT_S", 0.05)

    async def hangs() -> str | None:
        await asyncio.Event().wait()
        return None

    async def breaks() -> str | None:
        raise RuntimeError("bug")

    http.add_readiness_check("discord", hangs)
    http.add_readiness_check("slack", breaks)
    status, _, body = await get(http, "/readyz")
    assert status == 503
    assert "no answer within 0.05 s" in body and "the check failed (RuntimeError)" in body


async def test_metrics_need_the_bearer_token_when_one_is_set(http: HttpServer) -> None:
    metrics.record_rate_limited(platform="slack", method="chat.update")
    assert (await get(http, "/metrics"))[0] == 401
    assert (await get(http, "/metrics", Authorization="Bearer wrong"))[0] == 401
    assert (await get(http, "/metrics", Authorization=f"Basic {TOKEN}"))[0] == 401
    status, content_type, body = await get(http, "/metrics", Authorization=f"Bearer {TOKEN}")
    assert status == 200 and content_type.startswith("text/plain")
    assert 'relaybot_rate_limited_total{method="chat.update",platform="slack"}' in body
    for family in ("relaybot_answers_total", "relaybot_model_first_token_seconds", "relaybot_model_total_seconds",
                   "relaybot_tokens_total", "relaybot_tool_runs_total", "relaybot_approvals_total",
                   "relaybot_streamer_queue_depth", "relaybot_db_pool_in_use"):
        assert f"# TYPE {family.removesuffix('_total')}" in body, family


async def test_metrics_are_open_without_a_token() -> None:
    server = HttpServer(host="127.0.0.1", port=0)
    await server.start()
    try:
        assert (await get(server, "/metrics"))[0] == 200
    finally:
        await server.stop()
