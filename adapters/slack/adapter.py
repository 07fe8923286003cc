"""SlackAdapter: lifecycle (start, stop taking events, interrupt, close), the gate, the Bolt wiring, and the doctor line."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.answers import AnswerRunner
from adapters.base import AdapterPorts
from adapters.gate import Gate
from adapters.http.server import HttpServer
from core.config import Settings
from core.redact import redact_url
from core.engine import Engine

from .buttons import ACTION_ARGUMENTS, ACTION_PATTERN
from .clicks import SlackClicks
from .inbound import BotIdentity, SlackInbound
from .notifier import SlackNotifier
from .surface import PLATFORM, SlackFinalDelivery, SlackShownMessages, SlackSurfaces
from .transport import ScaledClock, SlackBudgets

logger = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
CLOSE_WAIT_S = 5.0


class SlackAdapter:
    """Implements adapters.base.PlatformAdapter for Slack.

    HTTP mode (no app token) adds `/slack/events` to the shared HttpServer, so construct the
    adapter before the server starts. `time_scale` runs the bot's Slack budgets on a scaled clock
    (tests and benchmarks match an emulator's time scale; production leaves it at 1.0).
    """

    platform = PLATFORM

    def __init__(
        self, *, settings: Settings, engine: Engine, ports: AdapterPorts, http: HttpServer | None = None,
        time_scale: float = 1.0,
    ) -> None:
        if not settings.slack_bot_token:
            raise ValueError("SLACK_BOT_TOKEN is not set")
        socket_mode = bool(settings.slack_app_token)
        if not socket_mode and (http is None or not settings.slack_signing_secret):
            raise ValueError("Slack HTTP mode needs SLACK_SIGNING_SECRET and the HTTP server (or set SLACK_APP_TOKEN)")
        self._settings = settings
        self._socket_handler: AsyncSocketModeHandler | None = None
        clock = ScaledClock(time_scale)
        self.client = AsyncWebClient(token=settings.slack_bot_token, base_url=settings.slack_api_url)
        self.surfaces = SlackSurfaces(
            client=self.client, budgets=SlackBudgets(
                clock=clock, share=settings.slack_rate_share,
                workspace_posts_per_minute=settings.slack_workspace_posts_per_minute,
            ), clock=clock
        )
        self.gate = Gate(platform=PLATFORM, allowed_workspaces=settings.slack_team_ids, setting="SLACK_TEAM_IDS", dedup=ports.dedup)
        self.runner = AnswerRunner(platform=PLATFORM, approvals=engine.approvals, live=ports.live, outbox=ports.outbox)
        self.inbound = SlackInbound(
            settings=settings, engine=engine, gate=self.gate, runner=self.runner, surfaces=self.surfaces,
            conversations=ports.conversations,
        )
        self.clicks = SlackClicks(
            approvals=engine.approvals, runner=self.runner, surfaces=self.surfaces, gate=self.gate, access=self.inbound.access
        )
        self.notifier = SlackNotifier(self.surfaces)
        self.app = AsyncApp(
            client=self.client, signing_secret=settings.slack_signing_secret or "",
            process_before_response=False, request_verification_enabled=not socket_mode,
        )
        self.app.middleware(self._gate_middleware)
        self.app.event("app_mention")(self._on_app_mention)
        self.app.event("message")(self._on_message)
        # Registered as is, so a click goes from Bolt straight to the click handler.
        self.app.action(ACTION_PATTERN)(self.clicks.on_click)
        self.app.action(ACTION_ARGUMENTS)(self.clicks.on_arguments)
        if not socket_mode and http is not None:
            http.app.router.add_post(EVENTS_PATH, self._handle_http)

    # --- lifecycle (PlatformAdapter) ---

    async def start(self) -> None:
        """Repairs answers a crash left unfinished, then takes events."""
        await self.inbound.open()
        await self.maintain()
        if self._settings.slack_app_token:
            self._socket_handler = AsyncSocketModeHandler(self.app, app_token=self._settings.slack_app_token)
            await self._socket_handler.connect_async()
            logger.info("Slack connected in Socket Mode")
        else:
            logger.info("Slack listening in HTTP mode at %s", EVENTS_PATH)

    async def maintain(self) -> None:
        """At start and every few seconds: repair what dead processes left streaming, deliver finals nobody is delivering."""
        await self.runner.repair_leftovers(SlackShownMessages(self.surfaces))
        await self.runner.deliver_pending(SlackFinalDelivery(self.surfaces))

    async def stop_accepting(self) -> None:
        self.gate.accepting = False

    async def interrupt_inflight(self) -> None:
        await self.runner.interrupt_all()

    async def close(self) -> None:
        """Disconnects. Answers still streaming are dropped as a crash would (their records stay)."""
        await self.gate.cancel_handlers(CLOSE_WAIT_S)
        tasks = self.runner.cancel_all()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
        if self._socket_handler is not None:
            await self._socket_handler.close_async()
            self._socket_handler = None
        await self.inbound.close()

    @property
    def inflight_answers(self) -> int:
        return self.runner.inflight

    # --- wiring ---

    async def _handle_http(self, request: web.Request) -> web.Response:
        response = await self.app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)

    async def _gate_middleware(self, body: dict[str, Any], next: Callable[[], Awaitable[Any]]) -> BoltResponse | None:
        # Dropping here must still answer 200, or Slack retries (and Bolt would say 404).
        if body.get("type") == "url_verification":
            return await next()
        if not self.gate.accepting:
            logger.info("shutting down: ignoring a Slack %s", body.get("type"))
            return BoltResponse(status=200, body="")
        team = str(body.get("team_id") or (body.get("team") or {}).get("id") or "")
        if not self.gate.allows(team):
            return BoltResponse(status=200, body="")
        return await next()

    async def _on_app_mention(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        await self.inbound.on_app_mention(body, event, _bot(context))

    async def _on_message(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        await self.inbound.on_message(body, event, _bot(context))


def _bot(context: AsyncBoltContext) -> BotIdentity:
    """This app's bot as Bolt learnt it from auth.test: how its own messages are recognised."""
    return BotIdentity(user_id=context.bot_user_id or "", bot_id=context.bot_id or "")


async def check_slack(settings: Settings) -> str:
    """`relaybot doctor`'s Slack line: is Slack configured, and is the bot token accepted (auth.test)?"""
    if not settings.slack_bot_token:
        return "not configured (SLACK_BOT_TOKEN is not set)"
    client = AsyncWebClient(token=settings.slack_bot_token, base_url=settings.slack_api_url)
    try:
        auth = await client.auth_test()
    except SlackApiError as exc:
        return f"FAILED — the bot token was refused ({exc.response.get('error', 'unknown error')})"
    except Exception as exc:
        return f"FAILED — cannot reach {redact_url(settings.slack_api_url)} ({exc.__class__.__name__})"
    mode = "Socket Mode" if settings.slack_app_token else "HTTP mode at /slack/events"
    missing = "" if settings.slack_app_token or settings.slack_signing_secret else " — SLACK_SIGNING_SECRET is missing"
    return f"ok — bot {auth.get('user')} ({auth.get('user_id')}) in {auth.get('team')} ({auth.get('team_id')}), {mode}{missing}"
