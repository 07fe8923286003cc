"""The runtime half of the one-door rule: every request reaching the Slack or Discord client was made from a transport module.

`install()` wraps the three places every platform request passes (slack_sdk's `AsyncWebClient.api_call`,
discord.py's `HTTPClient.request`, and its webhook adapter's `request`, which carries interaction
responses and followups). Each request records its caller: the nearest frame of the stack in our code
(adapters/, bot/, core/). A caller outside the transport modules is a violation; tests/conftest.py fails
the test during which it happened, naming the module. Calls the libraries make with no frame of ours on
the stack (the gateway's own requests) are exempt; a few lifecycle calls are allowed by `ALLOWED` below.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("adapters", "bot", "core")
# Modules allowed to hold the raw clients: each platform's transport (a module, or `transport_*.py` beside it
# once it grows), and the shared streaming transport.
TRANSPORT_NAMES = ("transport.py",)
TRANSPORT_PREFIX = "transport_"

# Lifecycle calls made outside a transport on purpose, by (module, request): proving the token at start and for
# readiness / `relaybot doctor` (auth.test), and discord.py's login and gateway look-up started by the adapter.
ALLOWED: frozenset[tuple[str, str]] = frozenset({
    ("adapters/slack/adapter.py", "auth.test"),
    ("adapters/discord/adapter.py", "GET /users/@me"),
    ("adapters/discord/adapter.py", "GET /gateway/bot"),
    ("adapters/discord/adapter.py", "GET /gateway"),
})


@dataclass(frozen=True)
class Violation:
    """A platform request whose nearest caller in our code is not a transport module."""

    platform: str
    request: str
    module: str
    line: int

    def __str__(self) -> str:
        return f"{self.platform} {self.request} called from {self.module}:{self.line} (not a transport module)"


_violations: list[Violation] = []
_installed = False


def is_transport(module: str) -> bool:
    name = module.rsplit("/", 1)[-1]
    return module.startswith("adapters/") and (name in TRANSPORT_NAMES or name.startswith(TRANSPORT_PREFIX))


@functools.lru_cache(maxsize=4096)
def _ours(filename: str) -> str | None:
    """A code file's path relative to the repository when it is in one of our layers, else None (resolved once)."""
    try:
        relative = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    return relative.as_posix() if relative.parts and relative.parts[0] in LAYERS else None


def caller(frame: FrameType | None) -> tuple[str, int] | None:
    """The nearest frame in our code (path relative to the repository, line), or None."""
    while frame is not None:
        module = _ours(frame.f_code.co_filename)
        if module is not None:
            return module, frame.f_lineno
        frame = frame.f_back
    return None


def check(platform: str, request: str, frame: FrameType | None) -> Violation | None:
    """Records (and returns) a violation when the request's nearest caller of ours is not a transport."""
    found = caller(frame)
    if found is None:
        return None
    module, line = found
    if is_transport(module) or (module, request) in ALLOWED:
        return None
    violation = Violation(platform=platform, request=request, module=module, line=line)
    _violations.append(violation)
    return violation


def take() -> list[Violation]:
    """The violations recorded since the last call, then forgotten."""
    found = list(_violations)
    _violations.clear()
    return found


def install() -> None:
    """Wraps the platform clients' request methods once per process (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    from slack_sdk.web.async_client import AsyncWebClient

    slack_call = AsyncWebClient.api_call

    async def api_call(self: Any, api_method: str, *args: Any, **kwargs: Any) -> Any:
        check("slack", api_method, sys._getframe(1))
        return await slack_call(self, api_method, *args, **kwargs)

    AsyncWebClient.api_call = api_call  # type: ignore[method-assign]

    import discord.http
    import discord.webhook.async_ as webhook

    discord_request = discord.http.HTTPClient.request

    async def request(self: Any, route: Any, *args: Any, **kwargs: Any) -> Any:
        check("discord", f"{route.method} {getattr(route, 'path', route.url)}", sys._getframe(1))
        return await discord_request(self, route, *args, **kwargs)

    discord.http.HTTPClient.request = request  # type: ignore[method-assign]

    webhook_request = webhook.AsyncWebhookAdapter.request

    async def webhook_call(self: Any, route: Any, *args: Any, **kwargs: Any) -> Any:
        check("discord", f"{route.method} {getattr(route, 'path', route.url)}", sys._getframe(1))
        return await webhook_request(self, route, *args, **kwargs)

    webhook.AsyncWebhookAdapter.request = webhook_call  # type: ignore[method-assign]
