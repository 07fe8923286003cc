"""Server-sent events over aiohttp: a streaming response, one `id`/`event`/`data` block per event, comment keep-alives."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


async def open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
        # Proxies such as nginx would otherwise hold events back in a buffer.
        "X-Accel-Buffering": "no",
    })
    await response.prepare(request)
    return response


async def send(response: web.StreamResponse, *, data: Any, event: str | None = None, id: str | None = None) -> None:
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event is not None:
        lines.append(f"event: {event}")
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    lines.extend(f"data: {line}" for line in payload.split("\n"))
    await response.write(("\n".join(lines) + "\n\n").encode())


async def keepalive(response: web.StreamResponse) -> None:
    """A comment line: clients ignore it, proxies see the connection is alive."""
    await response.write(b": keep-alive\n\n")
