"""What the fuzz bench measures with: a canary server outside the allowed networks, a site inside them, the
process's RSS, and the event-loop lag histogram read from /metrics."""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path

import aiohttp
from aiohttp import web

from .hostile import MAX_BODY_BYTES

CANARY_HOST = "127.0.0.2"
SITE_HOST = "127.0.0.1"
RSS_SAMPLE_S = 0.25
LAG_METRIC = "relaybot_event_loop_lag_seconds"
_BUCKET = re.compile(rf'^{LAG_METRIC}_bucket\{{le="([^"]+)"\}} ([0-9.e+]+)$', re.MULTILINE)


class Canary:
    """Counts every request that reaches it: any is a fetch that got past the URL guard or the schema rules."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._hit)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, CANARY_HOST, 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://{CANARY_HOST}:{port}"

    async def _hit(self, request: web.Request) -> web.Response:
        self.hits.append(f"{request.method} {request.path_qs}")
        return web.json_response({"type": "string", "canary": True})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class Site:
    """Pages inside READ_URL_ALLOWED_NETWORKS: a page, a big body, and a redirect to anywhere (the canary)."""

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/page", lambda _: web.Response(text="<html><body><p>Status: green.</p></body></html>",
                                                           content_type="text/html"))
        app.router.add_get("/big", lambda _: web.Response(body=b"<p>" + b"x" * (3 * MAX_BODY_BYTES) + b"</p>",
                                                          content_type="text/html"))
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/{tail:.*}", lambda _: web.Response(status=404, text="nothing here"))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, SITE_HOST, 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://{SITE_HOST}:{port}"

    async def _redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query.get("to") or "/page")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class RssSampler:
    """The process's resident set, sampled from /proc every RSS_SAMPLE_S; peak and a baseline in MB."""

    def __init__(self, pid: int) -> None:
        self._status = Path(f"/proc/{pid}/status")
        self.baseline_mb = 0.0
        self.peak_mb = 0.0
        self._task: asyncio.Task[None] | None = None

    def read_mb(self) -> float:
        try:
            for line in self._status.read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except (OSError, ValueError):
            pass
        return 0.0

    def mark_baseline(self) -> None:
        self.baseline_mb = self.read_mb()
        self.peak_mb = max(self.peak_mb, self.baseline_mb)

    def describe(self) -> str:
        """Where the resident set is now and its peak, for a phase's line: which phase grew the process."""
        return f"RSS {self.read_mb():.0f} MB, peak {self.peak_mb:.0f} MB"

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            self.peak_mb = max(self.peak_mb, self.read_mb())
            await asyncio.sleep(RSS_SAMPLE_S)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def lag_buckets(port: int) -> dict[float, float]:
    """The lag histogram's cumulative bucket counts by upper bound (inf included), read from /metrics."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/metrics", timeout=aiohttp.ClientTimeout(total=10)) as response:
            text = await response.text()
    return {float(le): float(count) for le, count in _BUCKET.findall(text)}


def worst_bucket(before: dict[float, float], after: dict[float, float]) -> tuple[float, float]:
    """The smallest bucket bound that holds every beat observed between two reads (the worst stall is at
    most that), and how many beats there were. (inf when a beat was later than the largest bound.)"""
    total = after.get(math.inf, 0.0) - before.get(math.inf, 0.0)
    for bound in sorted(after):
        if after[bound] - before.get(bound, 0.0) >= total:
            return bound, total
    return math.inf, total
