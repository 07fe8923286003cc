"""One aiohttp server for the process: /healthz, plus routes adapters add (e.g. /slack/events)."""

from __future__ import annotations

import logging

from aiohttp import web

log = logging.getLogger(__name__)


class HttpServer:
    """Serves on the configured host and port; adapters add routes before start()."""

    def __init__(self, *, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.app = web.Application()
        self.app.router.add_get("/healthz", self._healthz)
        self._runner: web.AppRunner | None = None
        self._healthy = True

    async def _healthz(self, request: web.Request) -> web.Response:
        if not self._healthy:
            return web.json_response({"status": "stopping"}, status=503)
        return web.json_response({"status": "ok"})

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
