"""A relaybot HTTP API on 127.0.0.1 over a real engine, the test database and the OpenAI emulator."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from adapters.http.api.adapter import ApiAdapter
from adapters.http.server import HttpServer
from core.retrieval.retriever import Retriever
from core.store.api_conversations import ApiConversations
from core.store.api_keys import ApiKeyStore
from core.store.db import Database
from core.store.event_journal import EventJournal
from core.tools import ToolRegistry, ToolSpec, builtin_registry
from tests.support.engine import make_engine


@dataclass
class Deploys:
    """A side-effect tool that needs approval, counting how often it really ran."""

    runs: list[dict[str, Any]] = field(default_factory=list)

    def spec(self) -> ToolSpec:
        async def run(ctx: Any, arguments: dict[str, Any]) -> str:
            self.runs.append(arguments)
            return f"deployed {arguments.get('target')}"

        return ToolSpec(
            name="deploy", description="Deploy a service.", requires_approval=True, run=run,
            parameters={"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]},
        )


def registry_with(deploys: Deploys) -> ToolRegistry:
    registry = builtin_registry()
    registry.register(deploys.spec())
    return registry


@dataclass
class Api:
    url: str
    adapter: ApiAdapter
    keys: ApiKeyStore

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"


@asynccontextmanager
async def serve_api(db: Database, llm_url: str, *, registry: ToolRegistry | None = None,
                    max_body_bytes: int = 100_000, keepalive_s: float = 10.0,
                    retriever: Retriever | None = None, **settings: Any) -> AsyncIterator[Api]:
    engine = make_engine(db, llm_url, registry=registry, retriever=retriever, **settings)
    server = HttpServer(host="127.0.0.1", port=0)
    keys = ApiKeyStore(db)
    adapter = ApiAdapter(engine=engine, keys=keys, conversations=ApiConversations(db), journal=EventJournal(db),
                         max_body_bytes=max_body_bytes, keepalive_s=keepalive_s)
    adapter.add_to(server.app)
    await server.start()
    try:
        yield Api(url=f"http://127.0.0.1:{server.port}", adapter=adapter, keys=keys)
    finally:
        await adapter.close()
        await server.stop()


@dataclass(frozen=True)
class Sse:
    id: str | None
    event: str | None
    data: Any


async def read_sse(response: aiohttp.ClientResponse, *, limit: int | None = None) -> list[Sse]:
    """Events (not comments) until the stream ends, or `limit` of them."""
    events: list[Sse] = []
    block: dict[str, str] = {}
    async for raw in response.content:
        line = raw.decode().rstrip("\n").rstrip("\r")
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(": ")
            block[name] = block[name] + "\n" + value if name in block else value
            continue
        if block:
            data = block.get("data", "")
            events.append(Sse(id=block.get("id"), event=block.get("event"),
                              data=json.loads(data) if data.startswith(("{", "[")) else data))
            block = {}
            if limit is not None and len(events) >= limit:
                break
    return events


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}
