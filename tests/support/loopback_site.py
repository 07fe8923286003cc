"""A web server of a test's own on 127.0.0.1: every GET goes to the subclass's `handle`, which sees the path."""

from __future__ import annotations

from aiohttp import web

# A handler holding a body back is cut off this soon when the site stops (aiohttp's default waits a minute).
SHUTDOWN_TIMEOUT_S = 0.5


class LoopbackSite:
    """Starts on a free port (or the port it had, when started again after `stop`) and records every path asked for
    in `hits`. `handle(request, path)` gets the path as recorded: without its leading slash, unless
    `PATH_PREFIX` says "/"."""

    PATH_PREFIX = ""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/{path:.*}", self._serve)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        path = self.PATH_PREFIX + request.match_info["path"]
        self.hits.append(path)
        return await self.handle(request, path)

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        raise NotImplementedError
