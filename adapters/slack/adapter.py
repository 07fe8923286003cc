"""SlackAdapter: lifecycle (start, stop taking events, interrupt, close), the gate, the Bolt wiring, readiness, and the doctor line."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.middleware.authorization.async_single_team_authorization import AsyncSingleTeamAuthorization
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.answers import AnswerRunner
from adapters.base import AdapterPorts
from adapters.gate import Gate
from adapters.http.server import HttpServer
from core import metrics, observe
from core.config import Settings
from core.redact import redact_url
from core.engine import Engine

from .assistant import SlackAssistant
from .buttons import ACTION_ARGUMENTS, ACTION_PATTERN
from .admin import CALLBACK_ID as SETTINGS_VIEW, COMMAND as SETTINGS_COMMAND, SlackAdmin
from .commands import SlackCommands
from .home import HOME_ACTION, SlackHome
from .native_stream import NativeSlackSurfaces, NativeStreaming
from .clicks import SlackClicks
from .controls import STOP_ACTION, STOP_SHORTCUT, SlackStops, StreamRuns
from .feedback import FEEDBACK_ACTION, WHY_VIEW, SlackFeedback
from .inbound import SlackInbound, is_question_event
from .learning_parts import SlackLearningParts
from .notifier import SlackNotifier
from .reader import BotIdentity, SlackReader
from .settings import SlackSettings
from .socket_close import close_socket
from .surface import PLATFORM, SlackFinalDelivery, SlackShownMessages
from .team_authorize import TeamAuthorize
from .team_clients import RateLimitCounter, TeamClients
from .team_tokens import OneTeamToken, TeamTokens, team_of
from .transport import ScaledClock, SlackBudgets

logger = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
CLOSE_WAIT_S = 5.0
# HTTP mode has no connection to watch: readiness is the last auth.test, repeated this often (by maintain).
AUTH_CHECK_INTERVAL_S = 60.0


class SlackAdapter:
    """Implements adapters.base.PlatformAdapter for Slack.

    HTTP mode (no app token) adds `/slack/events` to the shared HttpServer, so construct the
    adapter before the server starts. `time_scale` runs the bot's Slack budgets on a scaled clock
    (tests and benchmarks match an emulator's time scale; production leaves it at 1.0).

    Every Web API call goes with its team's token (adapters/slack/team_clients.py). Single-workspace mode:
    SLACK_BOT_TOKEN for every team, Bolt's single-team authorization. With `tokens` (a multi-workspace app's
    stored installs) Bolt authorizes each event by its team's token instead (TeamAuthorize), and
    `installation_store` gives Bolt its uninstall and token-revocation listeners.
    """

    platform = PLATFORM

    def __init__(
        self, *, settings: Settings, engine: Engine, ports: AdapterPorts, http: HttpServer | None = None,
        time_scale: float = 1.0, tokens: TeamTokens | None = None,
        installation_store: AsyncInstallationStore | None = None,
    ) -> None:
        slack = settings.platform_settings(SlackSettings)
        self._slack = slack
        self._tokens, self._installation_store = self._team_tokens(ports, tokens, installation_store)
        self.multi_team = not isinstance(self._tokens, OneTeamToken)
        socket_mode = _socket_mode(slack, http, multi_team=self.multi_team)
        self._socket_handler: AsyncSocketModeHandler | None = None
        # Every Web API call's 429 is counted (Bolt copies the handlers into its per-event clients too); no retry
        # handler re-sends (a post whose connection dropped may have been made: SlackWeb looks it up first).
        self.clients = TeamClients(self._tokens, base_url=slack.api_url, retry_handlers=[RateLimitCounter()],
                                   state=ports.state if self.multi_team else None)  # Grid orgs: several workspaces
        # Bolt's client: SLACK_BOT_TOKEN's in single-workspace mode; tokenless with many, each event's client
        # getting its team's token from TeamAuthorize.
        self.client = AsyncWebClient(token=None if self.multi_team else slack.bot_token, base_url=slack.api_url,
                                     retry_handlers=[RateLimitCounter()])
        self._identities: dict[str, BotIdentity] = {}  # each team's bot, as its events' authorize learnt it
        self._auth_problem: str | None = None if self.multi_team else "auth.test has not run yet"
        self._auth_checked_at: float | None = None
        self._build_answering(settings, engine, ports, clock=ScaledClock(time_scale))
        self._build_handlers(settings, engine, ports)
        self.app = self._build_app(ports, socket_mode=socket_mode)
        if not socket_mode and http is not None:
            http.app.router.add_post(EVENTS_PATH, self._handle_http)

    def _build_answering(self, settings: Settings, engine: Engine, ports: AdapterPorts, *, clock: ScaledClock) -> None:
        """The surfaces answers are written to, the gate events pass, and the runner that plays answers."""
        slack, share = self._slack, self._slack.rate_share if "rate_share" in self._slack.model_fields_set else None
        # Answers stream natively where Slack offers it (SLACK_NATIVE_STREAMING), else with post+update.
        self.native = NativeStreaming(setting=slack.native_streaming, clock=clock, share=share, streams=StreamRuns(ports.state))
        self.surfaces = NativeSlackSurfaces(
            native=self.native, client=self.clients, budgets=SlackBudgets(
                clock=clock, share=share, workspace_posts_per_minute=slack.workspace_posts_per_minute,
                history_tier=slack.history_tier, status_per_minute=slack.status_per_minute, companions=(self.native,),
            ), clock=clock, placeholder_after_s=settings.stream_placeholder_after_s,
            feedback=settings.feedback_buttons,
        )
        self.budgets = self.surfaces.budgets  # the runtime has them follow this process's shares
        self.gate = Gate(platform=PLATFORM, allowed_workspaces=slack.team_ids, setting="SLACK_TEAM_IDS", dedup=ports.dedup)
        self.runner = AnswerRunner(
            platform=PLATFORM, approvals=engine.approvals, live=ports.live, outbox=ports.outbox,
            outbox_max_age_s=settings.outbox_max_age_s, in_flight_max=settings.answers_in_flight_max,
        )
        self.notifier = SlackNotifier(self.surfaces)

    def _build_handlers(self, settings: Settings, engine: Engine, ports: AdapterPorts) -> None:
        """What takes each kind of event: messages, /ask, approval, Stop and 👍/👎 clicks, the Home tab, /relaybot."""
        # Who the bot is, for reads outside an event (read_conversation); auth.test fills it in.
        self.identity = BotIdentity(user_id="")
        # Thread context and the read_conversation tool read through this one reader.
        self.reader = SlackReader(web=self.surfaces.web, identity=self.identity_of)
        self.inbound = SlackInbound(
            settings=settings, engine=engine, gate=self.gate, runner=self.runner, surfaces=self.surfaces,
            conversations=ports.conversations, reader=self.reader, identity=self.identity_of,
        )
        access = self.inbound.access
        self.clicks = SlackClicks(
            approvals=engine.approvals, runner=self.runner, surfaces=self.surfaces, gate=self.gate, access=access,
            assistant=self._slack.assistant,
        )
        self.stops = SlackStops(runs=engine.runs, surfaces=self.surfaces, gate=self.gate, access=access, streams=self.native.streams)
        # 👍/👎 clicks and the 👎 modal (adapters/slack/feedback.py); registered even with FEEDBACK_BUTTONS off,
        # so buttons posted before it was turned off still count.
        self.feedback = SlackFeedback(feedback=ports.feedback, surfaces=self.surfaces, gate=self.gate, access=access)
        self.commands = SlackCommands(engine=engine, runner=self.runner, surfaces=self.surfaces, gate=self.gate, access=access,
                                      reader=self.reader)
        self.home = SlackHome(approvals=engine.approvals, surfaces=self.surfaces, clicks=self.clicks, gate=self.gate, access=access)
        # Learning from channels (LearnsChannels), and /relaybot's modal for admins and owners (or CHANNEL_ADMINS).
        self.learning = SlackLearningParts(settings=settings, web=self.surfaces.web, learning=getattr(ports, "learning", None))
        self.channel_history, self.channel_facts = self.learning.history, self.learning.facts
        self.admin = SlackAdmin(admin=engine.channel_admin, web=self.surfaces.web, gate=self.gate, learning=self.learning.learning)

    def _build_app(self, ports: AdapterPorts, *, socket_mode: bool) -> AsyncApp:
        """The Bolt app, the gate in front of every handler, and each handler registered for its events."""
        many: dict[str, Any] = ({"authorize": TeamAuthorize(self.surfaces.web), "installation_store": self._installation_store}
                                if self.multi_team else {})
        # Signed requests get their first sign ahead of Bolt's dispatch (_handle_http), checked as Bolt checks them.
        secret = self._slack.signing_secret
        self._verifier = SignatureVerifier(secret) if secret and not socket_mode else None
        app = AsyncApp(
            client=self.client, signing_secret=self._slack.signing_secret or "",
            process_before_response=False, request_verification_enabled=not socket_mode, **many,
        )
        app.middleware(self._gate_middleware)
        if self._slack.assistant:
            # Messages in assistant threads stop at this middleware: never answered twice by `message`.
            assistant = SlackAssistant(inbound=self.inbound, conversations=ports.conversations, bot=_bot, web=self.surfaces.web)
            app.assistant(assistant.middleware())
        app.event("app_home_opened")(self.home.on_home_opened)
        self.commands.register(app)  # /ask and the message shortcuts that ask
        app.command(SETTINGS_COMMAND)(self.admin.on_command)
        app.view(SETTINGS_VIEW)(self.admin.on_submit)
        app.action(HOME_ACTION)(self.home.on_click)
        app.event("app_mention")(self._on_app_mention)
        app.event("message")(self._on_message)
        self.learning.register(app)
        # Registered as is, so a click goes from Bolt straight to the click handler.
        app.action(ACTION_PATTERN)(self.clicks.on_click)
        app.action(ACTION_ARGUMENTS)(self.clicks.on_arguments)
        app.action(STOP_ACTION)(self.stops.on_stop)
        app.shortcut(STOP_SHORTCUT)(self.stops.on_shortcut)
        app.action(FEEDBACK_ACTION)(self.feedback.on_click)
        app.view(WHY_VIEW)(self.feedback.on_submit)
        return app

    # --- lifecycle (PlatformAdapter) ---

    async def start(self) -> None:
        """Asks auth.test once for the whole process, repairs answers a crash left unfinished, then takes events."""
        await self.inbound.open()
        # One session for every Web API call (Bolt's per-event clients copy it): without one, slack_sdk opens a
        # session and a connection (a TLS handshake, against slack.com) per call and closes them after. No limit:
        # a connector's cap would be a queue no deadline lane or budget knows of.
        self.client.session = self.clients.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        if not self.multi_team:  # many workspaces: each team's bot is learnt at its first event (TeamAuthorize)
            auth = await self._check_auth()
            if auth is not None:
                _seed_authorization(self.app, auth)
        await self.maintain()
        if self._slack.app_token:
            # Built and connected in a context naming the platform: the client's tasks, and the
            # event handlers they start, inherit it (metrics label their 429s and queues with it).
            context = observe.platform_context(PLATFORM)
            handler = context.run(AsyncSocketModeHandler, self.app, app_token=self._slack.app_token)
            self._socket_handler = handler
            await asyncio.create_task(handler.connect_async(), context=context)
            logger.info("Slack connected in Socket Mode")
        else:
            logger.info("Slack listening in HTTP mode at %s", EVENTS_PATH)

    async def maintain(self) -> None:
        """At start and every few seconds: repair what dead processes left streaming, deliver finals nobody is
        delivering; in HTTP mode, repeat auth.test when it is due (it is what readiness reports)."""
        with observe.platform_scope(PLATFORM):
            await self.runner.repair_leftovers(SlackShownMessages(self.surfaces))
            delivery = SlackFinalDelivery(self.surfaces)
            await self.runner.deliver_pending(delivery, finder=delivery)
            await self.native.streams.prune()
        due = self._auth_checked_at is None or time.monotonic() - self._auth_checked_at >= AUTH_CHECK_INTERVAL_S
        if not self._slack.app_token and due and not self.multi_team:
            await self._check_auth()

    async def readiness(self) -> str | None:
        """Socket Mode: the socket is open. HTTP mode: the last auth.test succeeded."""
        if self._slack.app_token:
            handler = self._socket_handler
            if handler is None:
                return "the Socket Mode connection is not open"
            return None if await handler.client.is_connected() else "the Socket Mode connection is not open"
        return self._auth_problem

    async def _check_auth(self) -> AsyncSlackResponse | None:
        """auth.test, remembered for readiness; the response when the token was accepted."""
        self._auth_checked_at = time.monotonic()
        try:
            auth = await self.client.auth_test()
        except SlackApiError as exc:
            error = exc.response.get("error", "unknown error") if exc.response is not None else "unknown error"
            self._auth_problem = f"auth.test failed ({error})"
        except Exception as exc:
            self._auth_problem = f"auth.test failed ({type(exc).__name__})"
        else:
            self._auth_problem = None
            self.identity = BotIdentity(user_id=str(auth.get("user_id") or ""), bot_id=str(auth.get("bot_id") or ""))
            return auth
        logger.warning("Slack %s", self._auth_problem)
        return None

    async def stop_accepting(self) -> None:
        self.gate.accepting = False
        # Slack spreads events over the open Socket Mode connections: closing this one now sends the
        # rest to the others (or, after a restart, to the new one) instead of acking events this
        # process will not answer. Answers in flight go on over the Web API.
        if self._socket_handler is not None:
            handler, self._socket_handler = self._socket_handler, None
            await close_socket(handler.client)

    async def interrupt_inflight(self) -> None:
        await self.runner.interrupt_all()

    async def close(self) -> None:
        """Disconnects. Answers still streaming are dropped as a crash would (their records stay)."""
        await self.gate.cancel_handlers(CLOSE_WAIT_S)
        tasks = self.runner.cancel_all()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
        if self._socket_handler is not None:
            handler, self._socket_handler = self._socket_handler, None
            await close_socket(handler.client)
        await self.inbound.close()
        await self.learning.close()
        await self.surfaces.signs.close()
        session, self.client.session, self.clients.session = self.client.session, None, None
        if session is not None:
            await session.close()

    @property
    def inflight_answers(self) -> int:
        return self.runner.inflight

    @property
    def queued_answers(self) -> int:
        return self.runner.queued

    # --- wiring ---

    def _team_tokens(
        self, ports: AdapterPorts, tokens: TeamTokens | None, installation_store: AsyncInstallationStore | None,
    ) -> tuple[TeamTokens, AsyncInstallationStore | None]:
        """Whose token each call uses: the stored installs of a multi-workspace app, else SLACK_BOT_TOKEN's."""
        return (tokens, installation_store) if tokens is not None else (OneTeamToken(self._slack.bot_token or ""), None)

    def identity_of(self, team_id: str) -> BotIdentity:
        """The team's bot: learnt by its events' authorize with many workspaces, else SLACK_BOT_TOKEN's (auth.test)."""
        return self._identities.get(team_id, self.identity)

    async def _handle_http(self, request: web.Request) -> web.Response:
        # Bolt runs the listeners in tasks started here: they inherit the platform.
        with observe.platform_scope(PLATFORM):
            try:
                bolt_request = await to_bolt_request(request)
            except (ValueError, TypeError, AttributeError, LookupError) as error:
                # Bolt reads the body and its context (team, user, channel) as it builds the request:
                # JSON or a form that does not parse, is not an object, or has fields of the wrong shape.
                # Slack never sends one; a 400 says so (a 500 would ask for a retry).
                return _unreadable(f"a body Bolt cannot read ({type(error).__name__})")
            if bolt_request.body.get("type") == "event_callback" and not isinstance(bolt_request.body.get("event"), dict):
                return _unreadable("an event_callback whose event is not an object")
            if self._verifier and not request.headers.get("X-Slack-Retry-Num") and self._verifier.is_valid(
                    bolt_request.raw_body, request.headers.get("X-Slack-Request-Timestamp", "0"),
                    request.headers.get("X-Slack-Signature", "")):
                self.inbound.sign_ahead(bolt_request.body)  # the first sign before Bolt's dispatch, once signed
            response = await self.app.async_dispatch(bolt_request)
        if response.status == 404:
            # A signed request no listener takes (Bolt verifies the signature first): Slack would retry
            # a 404 three times, and count it against the app's delivery failures.
            logger.info("no listener for a Slack request; acknowledged")
            return web.Response(status=200)
        return await to_aiohttp_response(response)

    async def _gate_middleware(
        self, body: dict[str, Any], req: AsyncBoltRequest, next: Callable[[], Awaitable[Any]]
    ) -> BoltResponse | None:
        # Dropping here must still answer 200, or Slack retries (and Bolt would say 404).
        if body.get("type") == "url_verification":
            return await next()
        if not self.gate.accepting:
            # Not a 200: Slack retries the event, reaching another instance or this one restarted.
            logger.info("shutting down: refusing a Slack %s so that Slack retries it", body.get("type"))
            return BoltResponse(status=503, body="")
        team = str(body.get("team_id") or (body.get("team") or {}).get("id") or "")
        # The workspace's Grid org (an org-wide install's authorizations name no team), for its calls and SLACK_TEAM_IDS.
        await self.clients.learn(key := team_of(body))
        if self.multi_team and key.team_id and req.context.bot_user_id:
            # Each team's bot, as authorized.
            self._identities[key.team_id] = BotIdentity(user_id=req.context.bot_user_id, bot_id=req.context.bot_id or "")
        if not self.gate.allows(team, org=key.enterprise_id):
            return BoltResponse(status=200, body="")
        # Ahead of Bolt's ack: a question whose record cannot be written is refused (HTTP 503, no Socket
        # Mode ack), so Slack redelivers it instead of it being acked into silence. The record also starts the
        # answer's first sign on a first delivery (adapters/slack/early_signs.py): it does not wait for the record.
        retry_num = str((req.headers.get("x-slack-retry-num") or ["0"])[0])
        if is_question_event(body) and not await self.inbound.record(body, retry_num=int(retry_num) if retry_num.isdigit() else 0):
            return BoltResponse(status=503, body="")
        return await next()

    async def _on_app_mention(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        await self.inbound.on_app_mention(body, event, _bot(context))

    async def _on_message(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        self.learning.on_message(body, event, _bot(context))  # handed over in the background: answering never waits
        await self.inbound.on_message(body, event, _bot(context))


def _unreadable(what: str) -> web.Response:
    logger.warning("refused a Slack request: %s", what)
    metrics.record_malformed_event(platform=PLATFORM)
    return web.Response(status=400, text="malformed request")


def _seed_authorization(app: AsyncApp, auth: AsyncSlackResponse) -> None:
    """Gives Bolt's single-workspace authorization the auth.test answer start() already has.

    Bolt asks auth.test on the first event and caches it, but every event arriving before that first
    answer asks too: a burst at start made one call per event. Bolt has no public way to hand it the
    answer, so this sets it on Bolt's own middleware (a missing one only means Bolt asks itself)."""
    for middleware in getattr(app, "_async_middleware_list", ()):
        if isinstance(middleware, AsyncSingleTeamAuthorization):
            middleware.auth_test_result = auth


def _socket_mode(slack: SlackSettings, http: HttpServer | None, *, multi_team: bool = False) -> bool:
    """Socket Mode when SLACK_APP_TOKEN is set, else HTTP mode; ValueError when neither can run."""
    if not slack.bot_token and not multi_team:
        raise ValueError("SLACK_BOT_TOKEN is not set")
    if not slack.app_token and (http is None or not slack.signing_secret):
        raise ValueError("Slack HTTP mode needs SLACK_SIGNING_SECRET and the HTTP server (or set SLACK_APP_TOKEN)")
    return bool(slack.app_token)


def _bot(context: AsyncBoltContext) -> BotIdentity:
    """This app's bot as Bolt learnt it from auth.test: how its own messages are recognised."""
    return BotIdentity(user_id=context.bot_user_id or "", bot_id=context.bot_id or "")


async def check_slack(settings: Settings) -> str:
    """`relaybot doctor`'s Slack line: is Slack configured, and is the bot token accepted (auth.test)?"""
    slack = settings.platform_settings(SlackSettings)
    if not slack.bot_token:
        return "not configured (SLACK_BOT_TOKEN is not set)"
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    try:
        auth = await client.auth_test()
    except SlackApiError as exc:
        return f"FAILED — the bot token was refused ({exc.response.get('error', 'unknown error')})"
    except Exception as exc:
        return f"FAILED — cannot reach {redact_url(slack.api_url)} ({exc.__class__.__name__})"
    mode = "Socket Mode" if slack.app_token else "HTTP mode at /slack/events"
    missing = "" if slack.app_token or slack.signing_secret else " — SLACK_SIGNING_SECRET is missing"
    return f"ok — bot {auth.get('user')} ({auth.get('user_id')}) in {auth.get('team')} ({auth.get('team_id')}), {mode}{missing}"
