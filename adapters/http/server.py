"""One aiohttp server for the process: /healthz, /readyz, /metrics, plus routes adapters add (e.g. /slack/events)."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from core import metrics

log = logging.getLogger(__name__)

# A readiness check that has not answered by then counts as not ready (a load balancer's probe waits less).
READY_CHECK_TIMEOUT_S = 3.0

# None when ready; otherwise the reason, in a few words.
ReadinessCheck = Callable[[], Awaitable[str | None]]
# What is wrong with some teams only (a Slack workspace whose token refresh fails), by team: shown, never unready.
ReadinessNotes = Callable[[], Awaitable[Mapping[str, str]]]


class HttpServer:
    """Serves on the configured host and port; adapters add routes before start().

    /healthz: the process is alive (503 only while shutting down). /readyz: every readiness check
    passes (the database, each platform), else 503 with the reasons; either way with `notes`, what is wrong with
    some teams only (by platform, then team), which fails no one's readiness. /metrics: Prometheus' text
    format, behind `Authorization: Bearer <metrics_token>` when a token is set.
    """

    def __init__(self, *, host: str, port: int, metrics_token: str | None = None) -> None:
        self.host = host
        self.port = port
        self.app = web.Application()
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self.app.router.add_get("/metrics", self._metrics)
        self._metrics_token = metrics_token or None
        self._checks: dict[str, ReadinessCheck] = {}
        self._notes: dict[str, ReadinessNotes] = {}
        self._runner: web.AppRunner | None = None
        self._healthy = True

    def add_readiness_check(self, name: str, check: ReadinessCheck) -> None:
        """/readyz answers 200 only when `check()` (and every other) returns None."""
        self._checks[name] = check

    def add_readiness_notes(self, name: str, notes: ReadinessNotes) -> None:
        """/readyz shows `notes()` (team → what is wrong there) under `notes.<name>`; they never make it 503, so one
        team's trouble leaves the others served."""
        self._notes[name] = notes

    async def _healthz(self, request: web.Request) -> web.Response:
        if not self._healthy:
            return web.json_response({"status": "stopping"}, status=503)
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        if not self._healthy:
            return web.json_response({"status": "stopping", "reasons": {"process": "shutting down"}}, status=503)
        names, noted = list(self._checks), list(self._notes)
        results, notes = await asyncio.gather(
            asyncio.gather(*(_bounded(self._checks[name]) for name in names)),
            asyncio.gather(*(_noted(self._notes[name]) for name in noted)),
        )
        reasons = {name: reason for name, reason in zip(names, results) if reason is not None}
        shown = {"notes": {name: note for name, note in zip(noted, notes) if note}}
        if not shown["notes"]:
            shown = {}
        if reasons:
            return web.json_response({"status": "not ready", "reasons": reasons, **shown}, status=503)
        return web.json_response({"status": "ready", **shown})

    async def _metrics(self, request: web.Request) -> web.Response:
        if self._metrics_token is not None and not _bearer_matches(request, self._metrics_token):
            return web.json_response(
                {"error": "a bearer token is required"}, status=401, headers={"WWW-Authenticate": "Bearer"}
            )
        body, content_type = metrics.render()
        response = web.Response(body=body)
        # aiohttp refuses a charset inside content_type; Prometheus' type carries one.
        response.headers["Content-Type"] = content_type
        return response

    def mark_stopping(self) -> None:
        """Health checks fail from now on, so a load balancer stops sending new work."""
        self._healthy = False

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = site._server.sockets if site._server else []  # type: ignore[union-attr]
        if sockets:
            self.port = sockets[0].getsockname()[1]
        log.info("HTTP server listening on %s:%s", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()


async def _bounded(check: ReadinessCheck) -> str | None:
    try:
        return await asyncio.wait_for(check(), READY_CHECK_TIMEOUT_S)
    except asyncio.TimeoutError:
        return f"no answer within {READY_CHECK_TIMEOUT_S:g} s"
    except Exception as error:
        log.warning("a readiness check failed", exc_info=True)
        return f"the check failed ({type(error).__name__})"


async def _noted(notes: ReadinessNotes) -> dict[str, str]:
    """The notes, or none when they cannot be read in time (the readiness checks say why the database is away)."""
    try:
        return dict(await asyncio.wait_for(notes(), READY_CHECK_TIMEOUT_S))
    except Exception:
        log.warning("readiness notes could not be read", exc_info=True)
        return {}


def _bearer_matches(request: web.Request, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    # Constant time: the comparison must not tell a prober how much of the token it guessed.
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())
