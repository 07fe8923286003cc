"""The platform table: every platform this build can serve, each one entry (adapters/<name>/platform.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiohttp import web

from adapters.discord import DISCORD
from adapters.platform import Platform
from adapters.slack import SLACK

if TYPE_CHECKING:
    from adapters.http.api.adapter import ApiAdapter

PLATFORMS: tuple[Platform, ...] = (SLACK, DISCORD)


def by_name(platforms: Sequence[Platform] = PLATFORMS) -> dict[str, Platform]:
    return {platform.name: platform for platform in platforms}


class ApiLifecycle:
    """The HTTP API in the platforms' lifecycle: its routes join the server now (before it starts); it refuses
    new requests when the platforms stop taking events, and closes its streams with them."""

    def __init__(self, api: ApiAdapter, app: web.Application) -> None:
        self.api = api
        api.add_to(app)

    async def start(self) -> None:
        """Nothing to connect: the server it is routed on is already started."""

    async def stop_accepting(self) -> None:
        self.api.stop_accepting()

    async def close(self) -> None:
        await self.api.close()
