"""Server-sent events over aiohttp: a streaming response, one `id`/`event`/`data` block per event, comment keep-alives."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from types import TracebackType
from typing import Any

from aiohttp import web

# A comment line: clients ignore it, proxies see the connection is alive.
KEEPALIVE = b": keep-alive\n\n"
# While events keep coming, a stream is written at most this often: what comes meanwhile goes in the same write
# (one send for the server, one read for the client, instead of one per token). After a quiet spell the next
# event is written at once, so a model streaming at reading speed (tens of ms a token) sees no delay at all; a
# token right behind another waits at most this long.
BATCH_INTERVAL_S = 0.002
# More than this waiting for a slow client: the producer waits too (aiohttp's own write drains at 64 KiB).
HIGH_WATER_BYTES = 0x10000

_encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


async def open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
        # Proxies such as nginx would otherwise hold events back in a buffer.
        "X-Accel-Buffering": "no",
    })
    await response.prepare(request)
    return response


def event_bytes(*, data: Any, event: str | None = None, id: str | None = None) -> bytes:
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event is not None:
        lines.append(f"event: {event}")
    payload = data if isinstance(data, str) else _encode_json(data)
    lines.extend(f"data: {line}" for line in payload.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


async def send(response: web.StreamResponse, *, data: Any, event: str | None = None, id: str | None = None) -> None:
    await response.write(event_bytes(data=data, event=event, id=id))


class Batcher:
    """Writes a stream's events in order, batched: an event after a quiet spell at once, from the producer's own
    `add`; events that come while a write is under way or within `interval_s` of the last one in a single write, from
    a task of the batcher's own, a moment later.

    `add` takes whole events as bytes, or answer text, which `text_event` turns into one event for all the text
    added in a row (for /v1, whose chunks carry no id; /api's events keep one id each). A write that fails (the
    client left) is raised by the next `add`, and by leaving the `async with`.
    """

    def __init__(self, response: web.StreamResponse, *, text_event: Callable[[str], bytes] | None = None,
                 interval_s: float | None = None) -> None:
        self._response = response
        self._text_event = text_event
        self._interval_s = BATCH_INTERVAL_S if interval_s is None else interval_s
        self._parts: list[bytes | str] = []
        self._size = 0
        self._wake = asyncio.Event()
        self._written = asyncio.Event()
        self._closing = False
        self._closed: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._ready_at = 0.0  # loop time before which a write waits, gathering what comes meanwhile
        self._busy = False  # a write is under way
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Batcher:
        self._closed = self._loop.create_future()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        assert self._task is not None
        if kind is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            return
        self._closing = True
        assert self._closed is not None
        self._closed.set_result(None)
        self._wake.set()
        await self._task
        self._raise()

    async def add(self, part: bytes | str) -> None:
        """A whole event as bytes, or answer text (see `text_event`); waits while a slow client is far behind."""
        self._raise()
        if not self._parts and not self._busy and self._loop.time() >= self._ready_at:
            # Nothing waiting and the stream was quiet: written here and now, without waking the writer task.
            await self._write([part])
            self._raise()
            return
        self._parts.append(part)
        self._size += len(part)
        self._wake.set()
        while self._size > HIGH_WATER_BYTES and self._error is None:
            self._written.clear()
            await self._written.wait()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            wait_s = self._ready_at - self._loop.time()
            if wait_s > 0 and not self._closing:
                # Events right behind the last write join the next one; the end of the stream does not wait.
                assert self._closed is not None
                await asyncio.wait({self._closed}, timeout=wait_s)
            self._wake.clear()
            parts, self._parts, self._size = self._parts, [], 0
            if parts:
                await self._write(parts)
                if self._error is not None:
                    return
            if self._closing and not self._parts:
                return

    async def _write(self, parts: list[bytes | str]) -> None:
        self._busy = True
        try:
            await self._response.write(self._join(parts))
        except Exception as error:  # handed to the producer, which ends the stream
            self._error = error
        finally:
            self._busy = False
            self._written.set()
        self._ready_at = self._loop.time() + self._interval_s

    def _join(self, parts: list[bytes | str]) -> bytes:
        out: list[bytes] = []
        text: list[str] = []
        for part in parts:
            if isinstance(part, str):
                text.append(part)
                continue
            if text:
                out.append(self._text(text))
                text = []
            out.append(part)
        if text:
            out.append(self._text(text))
        return b"".join(out)

    def _text(self, text: list[str]) -> bytes:
        assert self._text_event is not None, "text needs a text_event"
        return self._text_event("".join(text))
