"""Socket Mode: websocket connections with hello, envelope pushes and recorded acks."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from typing import Literal

from aiohttp import WSMsgType, web

from .state import JsonDict, SocketAck

EnvelopeType = Literal["events_api", "interactive", "slash_commands"]


class SocketHub:
    """The app-level side of Socket Mode: one app, any number of client connections."""

    def __init__(self, *, app_id: str) -> None:
        self._app_id = app_id
        self._tickets: set[str] = set()
        self._connections: list[web.WebSocketResponse] = []
        self._connected = asyncio.Event()
        self._pending: dict[str, asyncio.Future[JsonDict]] = {}
        self._round_robin = itertools.count()
        self.acks: list[SocketAck] = []

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def issue_ticket(self) -> str:
        ticket = uuid.uuid4().hex
        self._tickets.add(ticket)
        return ticket

    async def handle(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            raise web.HTTPUnauthorized(text="invalid or reused ticket")
        self._tickets.discard(ticket)  # Slack's socket URLs are single-use
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._connections.append(ws)
        await ws.send_str(json.dumps({
            "type": "hello",
            "num_connections": len(self._connections),
            "debug_info": {"host": "emulator", "approximate_connection_time": 18060},
            "connection_info": {"app_id": self._app_id},
        }))
        self._connected.set()
        try:
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    self._on_text(message.data)
        finally:
            self._connections.remove(ws)
            if not self._connections:
                self._connected.clear()
        return ws

    def _on_text(self, data: str) -> None:
        try:
            message = json.loads(data)
        except json.JSONDecodeError:
            return
        envelope_id = message.get("envelope_id") if isinstance(message, dict) else None
        waiting = self._pending.pop(envelope_id, None) if isinstance(envelope_id, str) else None
        if waiting is not None and not waiting.done():
            waiting.set_result(message)

    async def wait_connected(self, *, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._connected.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def push(
        self, payload: JsonDict, *, envelope_type: EnvelopeType, timeout_s: float,
        retry_attempt: int, retry_reason: str, accepts_response_payload: bool,
    ) -> SocketAck | None:
        """Sends one envelope to a connected client; the ack, or None if none came in time."""
        deadline = time.monotonic() + timeout_s
        if not await self.wait_connected(timeout_s=timeout_s):
            return None
        envelope_id = str(uuid.uuid4())
        envelope: JsonDict = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": envelope_type,
            "accepts_response_payload": accepts_response_payload,
        }
        if envelope_type == "events_api":
            envelope["retry_attempt"] = retry_attempt
            envelope["retry_reason"] = retry_reason
        future: asyncio.Future[JsonDict] = asyncio.get_running_loop().create_future()
        started = time.perf_counter()
        self._pending[envelope_id] = future
        ws = self._connections[next(self._round_robin) % len(self._connections)]
        await ws.send_str(json.dumps(envelope))
        try:
            reply = await asyncio.wait_for(future, max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self._pending.pop(envelope_id, None)
            return None
        ack = SocketAck(envelope_id=envelope_id, envelope_type=envelope_type,
                        payload=reply.get("payload"), latency_s=time.perf_counter() - started)
        self.acks.append(ack)
        return ack

    async def request_refresh(self) -> None:
        """Asks every client to reconnect, as Slack does periodically."""
        for ws in list(self._connections):
            await ws.send_str(json.dumps({"type": "disconnect", "reason": "refresh_requested"}))

    async def close(self) -> None:
        for ws in list(self._connections):
            await ws.close()
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
