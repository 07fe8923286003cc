"""SlackAdapter: the Bolt AsyncApp (HTTP mode or Socket Mode) wired to the engine."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from adapters import wording
from adapters.http.server import HttpServer
from core.config import Settings
from core.engine import Engine
from core.store.db import Database
from core.store.live_messages import LiveMessages
from core.store.processed_events import ProcessedEvents

from .answers import PLATFORM, AnswerRunner
from .approval_blocks import ACTION_PATTERN
from .approvals import ApprovalClicks
from .budgets import ScaledClock, SlackBudgets
from .handlers import EventHandlers
from .notifier import SlackNotifier
from .transport import send_paced

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
        self, *, settings: Settings, engine: Engine, db: Database, http: HttpServer | None = None,
        time_scale: float = 1.0,
    ) -> None:
        if not settings.slack_bot_token:
            raise ValueError("SLACK_BOT_TOKEN is not set")
        socket_mode = bool(settings.slack_app_token)
        if not socket_mode and (http is None or not settings.slack_signing_secret):
            raise ValueError("Slack HTTP mode needs SLACK_SIGNING_SECRET and the HTTP server (or set SLACK_APP_TOKEN)")
        self._settings = settings
        self._engine = engine
        self._accepting = True
        self._socket_handler: AsyncSocketModeHandler | None = None
        self._session: aiohttp.ClientSession | None = None
        self._live = LiveMessages(db)
        self._clock = ScaledClock(time_scale)
        self._budgets = SlackBudgets(clock=self._clock, share=settings.slack_rate_share)
        self.client = AsyncWebClient(token=settings.slack_bot_token, base_url=settings.slack_api_url)
        self.app = AsyncApp(
            client=self.client, signing_secret=settings.slack_signing_secret or "",
            process_before_response=False, request_verification_enabled=not socket_mode,
        )
        self._runner = AnswerRunner(client=self.client, engine=engine, live=self._live, budgets=self._budgets,
                                    clock=self._clock)
        self._clicks = ApprovalClicks(client=self.client, engine=engine, runner=self._runner, budgets=self._budgets,
                                      clock=self._clock)
        self._processed = ProcessedEvents(db)
        self._handlers: EventHandlers | None = None
        self.notifier = SlackNotifier(client=self.client, engine=engine, budgets=self._budgets, clock=self._clock)
        self._register()
        if not socket_mode and http is not None:
            http.app.router.add_post(EVENTS_PATH, self._handle_http)

    # --- lifecycle (PlatformAdapter) ---

    async def start(self) -> None:
        """Marks answers a crash left unfinished as interrupted, then takes events."""
        self._session = aiohttp.ClientSession()
        self._handlers = EventHandlers(
            settings=self._settings, engine=self._engine, processed=self._processed, runner=self._runner,
            client=self.client, session=self._session,
        )
        await self._mark_leftovers_interrupted()
        if self._settings.slack_app_token:
            self._socket_handler = AsyncSocketModeHandler(self.app, app_token=self._settings.slack_app_token)
            await self._socket_handler.connect_async()
            logger.info("Slack connected in Socket Mode")
        else:
            logger.info("Slack listening in HTTP mode at %s", EVENTS_PATH)

    async def stop_accepting(self) -> None:
        self._accepting = False

    async def interrupt_inflight(self) -> None:
        await self._runner.interrupt_all()

    async def close(self) -> None:
        """Disconnects. Answers still streaming are dropped as a crash would (their rows stay)."""
        tasks = self._runner.cancel_all()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
        if self._socket_handler is not None:
            await self._socket_handler.close_async()
            self._socket_handler = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def inflight_answers(self) -> int:
        return self._runner.inflight_count

    # --- wiring ---

    async def _handle_http(self, request: web.Request) -> web.Response:
        response = await self.app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)

    def _register(self) -> None:
        self.app.middleware(self._gate)
        self.app.event("app_mention")(self._on_app_mention)
        self.app.event("message")(self._on_message)
        self.app.action(ACTION_PATTERN)(self._on_action)

    async def _gate(self, body: dict[str, Any], next: Callable[[], Awaitable[Any]]) -> BoltResponse | None:
        # Dropping here must still answer 200, or Slack retries (and Bolt would say 404).
        if body.get("type") == "url_verification":
            return await next()
        if not self._accepting:
            logger.info("shutting down: ignoring a Slack %s", body.get("type"))
            return BoltResponse(status=200, body="")
        team = str(body.get("team_id") or (body.get("team") or {}).get("id") or "")
        allowed = self._settings.slack_team_ids
        if allowed and team not in allowed:
            logger.warning("ignoring a Slack %s from workspace %s, which is not in SLACK_TEAM_IDS", body.get("type"), team)
            return BoltResponse(status=200, body="")
        return await next()

    async def _on_app_mention(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        assert self._handlers is not None, "start() the adapter first"
        await self._handlers.on_app_mention(body, event, context.bot_user_id or "")

    async def _on_message(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        assert self._handlers is not None, "start() the adapter first"
        await self._handlers.on_message(body, event, context.bot_user_id or "")

    async def _on_action(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        await self._clicks.on_click(body)

    async def _mark_leftovers_interrupted(self) -> None:
        leftovers = await self._live.take_all(PLATFORM)
        for message in leftovers:
            try:
                await send_paced(
                    lambda message=message: self.client.chat_update(  # type: ignore[misc]
                        channel=message.channel, ts=message.message_id, text=wording.interrupted()
                    ),
                    budget=self._budgets.edit(message.workspace), clock=self._clock,
                )
            except Exception:
                logger.exception("could not mark message %s in %s as interrupted", message.message_id, message.channel)
        if leftovers:
            logger.info("marked %d unfinished Slack answers as interrupted", len(leftovers))
