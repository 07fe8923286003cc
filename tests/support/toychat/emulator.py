"""The toy chat server a test runs on 127.0.0.1: people say things and press buttons; the bot long-polls events,
posts and edits messages (every version kept), and whispers to one person."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

POLL_WAIT_S = 1.0


@dataclass
class ToyMessage:
    id: str
    channel: str
    thread: str
    versions: list[dict[str, Any]] = field(default_factory=list)  # {"text", "buttons"}, oldest first

    @property
    def text(self) -> str:
        return str(self.versions[-1]["text"])

    @property
    def buttons(self) -> list[dict[str, str]]:
        return list(self.versions[-1]["buttons"])


class ToyChatServer:
    """Events are numbered; GET /events?after=N answers those after N (waiting up to a second for one)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.messages: dict[str, ToyMessage] = {}
        self.whispers: list[tuple[str, str]] = []  # (user, text)
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/events", self._events)
        app.router.add_post("/messages", self._post)
        app.router.add_post("/messages/{id}", self._edit)
        app.router.add_post("/whispers", self._whisper)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def say(self, *, channel: str, user: str, text: str) -> str:
        """A person's message mentioning the bot; its id is the thread the answer goes in."""
        message_id = f"u{next(self._ids)}"
        await self._add_event({"type": "mention", "id": message_id, "channel": channel, "user": user, "text": text})
        return message_id

    async def press(self, message_id: str, *, user: str, value: str) -> None:
        """A person presses the button of `message_id` whose value is `value`."""
        message = self.messages[message_id]
        await self._add_event({"type": "click", "message_id": message_id, "channel": message.channel,
                               "thread": message.thread, "user": user, "value": value})

    def in_thread(self, thread: str) -> list[ToyMessage]:
        return [m for m in self.messages.values() if m.thread == thread]

    async def _add_event(self, event: dict[str, Any]) -> None:
        async with self._changed:
            self.events.append({**event, "seq": len(self.events) + 1})
            self._changed.notify_all()

    async def _events(self, request: web.Request) -> web.Response:
        after = int(request.query.get("after", "0"))
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: len(self.events) > after), POLL_WAIT_S)
            except asyncio.TimeoutError:
                pass
            return web.json_response(self.events[after:])

    async def _post(self, request: web.Request) -> web.Response:
        body = await request.json()
        message = ToyMessage(id=f"b{next(self._ids)}", channel=body["channel"], thread=body.get("thread", ""))
        message.versions.append({"text": body["text"], "buttons": body.get("buttons", [])})
        self.messages[message.id] = message
        return web.json_response({"id": message.id})

    async def _edit(self, request: web.Request) -> web.Response:
        message = self.messages.get(request.match_info["id"])
        if message is None:
            return web.json_response({"error": "no such message"}, status=404)
        body = await request.json()
        message.versions.append({"text": body["text"], "buttons": body.get("buttons", [])})
        return web.json_response({"ok": True})

    async def _whisper(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.whispers.append((body["user"], body["text"]))
        return web.json_response({"ok": True})
