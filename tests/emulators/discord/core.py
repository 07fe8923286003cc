"""Shared machinery of the emulator: JSON answers, rate-limit middleware, storing and dispatching messages."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from tests.emulators.discord.gateway import (
    INTENT_DIRECT_MESSAGES,
    INTENT_GUILD_MESSAGES,
    INTENT_MESSAGE_CONTENT,
    GatewayHub,
    GatewaySession,
)
from tests.emulators.discord.faults import Faults
from tests.emulators.discord.limits import BucketDecision, FixedWindowBucket, RateLimiter
from tests.emulators.discord.models import (
    EPHEMERAL_FLAG,
    GlobalLimitConfig,
    JSONDict,
    MessageVersion,
    RateLimitConfig,
    RequestRecord,
    StoredMessage,
)
from tests.emulators.discord.payloads import message_payload
from tests.emulators.discord.state import World

# Discord keeps a message nonce for a few minutes (real time: it is a delivery guarantee, not a rate).
NONCE_WINDOW_S = 300.0

API_PREFIX = "/api/v10"
GENERIC_BUCKET_LIMIT = 50
GENERIC_BUCKET_WINDOW_S = 1.0
CHANNEL_BUCKET_ROUTES = frozenset({"message_create", "message_edit"})
WEBHOOK_BUCKET_ROUTES = frozenset({"webhook_create", "webhook_edit", "webhook_edit_followup"})
UNAUTHENTICATED_PREFIXES = (f"{API_PREFIX}/interactions/", f"{API_PREFIX}/webhooks/", "/attachments/", "/gateway")
# Discord: "Interaction endpoints are not bound to the bot's Global Rate Limit."
GLOBAL_LIMIT_EXEMPT_PREFIXES = (f"{API_PREFIX}/interactions/", f"{API_PREFIX}/webhooks/")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(body: object, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # discord.py parses JSON only when Content-Type is exactly "application/json" (no charset).
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(body=json.dumps(body).encode(), status=status, headers=all_headers)


def error_response(status: int, code: int, message: str, errors: JSONDict | None = None) -> web.Response:
    body: JSONDict = {"code": code, "message": message}
    if errors:
        body["errors"] = errors
    return json_response(body, status=status)


def _bucket_hash(route_name: str) -> str:
    return hashlib.sha1(route_name.encode()).hexdigest()[:32]


class EmulatorCore:
    """The world plus the rules every route shares; REST modules and the test API build on it."""

    def __init__(
        self,
        *,
        time_scale: float,
        rate_limit: RateLimitConfig | None,
        global_limit: GlobalLimitConfig | None,
        bot_token: str,
        bot_name: str,
        gateway_url: Callable[[], str],
    ) -> None:
        self.time_scale = time_scale
        self.rate_limit = rate_limit
        self.global_limit = global_limit
        self.world = World(bot_token=bot_token, bot_name=bot_name)
        self.limiter = RateLimiter()
        self._global_bucket: FixedWindowBucket | None = None
        self.hub = GatewayHub(
            self.world, heartbeat_interval_ms=max(int(41_250 * time_scale), 500), gateway_url=gateway_url
        )
        self.count_429 = 0
        self.count_global_429 = 0
        self.faults = Faults()
        # How long Discord remembers a message nonce for enforce_nonce (real seconds, not scaled).
        self.nonce_window_s = NONCE_WINDOW_S
        # How long an interaction's token works, in seconds; None: Discord's 15 minutes times time_scale.
        self.token_lifetime_s: float | None = None

    # ---- middleware: auth, rate limits, request log --------------------------------------------

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith(UNAUTHENTICATED_PREFIXES):
            if request.headers.get("Authorization") != f"Bot {self.world.bot_token}":
                return self._log(request, json_response({"message": "401: Unauthorized", "code": 0}, status=401))
        if request.path.startswith(("/attachments/", "/gateway")):
            return await handler(request)
        refused = self._take_global(request)
        if refused is not None:
            return self._log(request, refused)
        decision = self._take_bucket(request)
        if not decision.allowed:
            self.count_429 += 1
            body = {"message": "You are being rate limited.", "retry_after": round(decision.retry_after_s, 3), "global": False}
            return self._log(request, json_response(body, status=429, headers=decision.headers))
        route = request.match_info.route.name or ""
        planned = self.faults.plan(route, request.match_info.get("channel_id", "")) if self.faults.plan else None
        if planned is not None and planned.kind == "ratelimited":
            self.count_429 += 1
            body = {"message": "You are being rate limited.", "retry_after": planned.retry_after_s, "global": False}
            headers = {**decision.headers, "X-RateLimit-Remaining": "0", "X-RateLimit-Scope": "user",
                       "Retry-After": f"{planned.retry_after_s:.3f}", "Via": "1.1 google"}
            return self._log(request, json_response(body, status=429, headers=headers))
        if planned is not None and planned.kind == "dropped":
            # Never done: the connection drops before Discord reads the call.
            if request.transport is not None:
                request.transport.abort()
            return self._log(request, web.Response(status=499))
        response = await handler(request)
        fault = self.faults.take(route) if 200 <= response.status < 300 else None
        if fault is None and planned is not None and 200 <= response.status < 300:
            fault = planned.after_work(route)
        if fault is not None and fault.kind == "drop":
            # The work is done; the bot never hears so (the connection goes before the answer).
            if request.transport is not None:
                request.transport.abort()
            return self._log(request, response)
        if fault is not None:
            response = json_response({"message": f"{fault.status}: Internal Server Error", "code": 0}, status=fault.status)
        response.headers.update(decision.headers)
        return self._log(request, response)

    def _log(self, request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
        route = request.match_info.route.name or ""
        record = RequestRecord(
            method=request.method, path=request.path, status=response.status, at=time.monotonic(), route=route,
            query=request.query_string,
        )
        self.world.request_log.append(record)
        return response

    def _take_global(self, request: web.Request) -> web.Response | None:
        """The 429 Discord answers when the bot's requests across all routes exceed the global limit."""
        config = self.global_limit
        if config is None or request.path.startswith(GLOBAL_LIMIT_EXEMPT_PREFIXES):
            return None
        window_s = config.window_s * self.time_scale
        bucket = self._global_bucket
        if bucket is None or bucket.limit != config.limit or bucket.window_s != window_s:
            bucket = self._global_bucket = FixedWindowBucket(name="global", limit=config.limit, window_s=window_s)
        decision = bucket.take(bucket_hash="global")
        if decision.allowed:
            return None
        self.count_429 += 1
        self.count_global_429 += 1
        retry_after = round(decision.retry_after_s, 3)
        # A global 429 carries no bucket headers, only these (and Via, so discord.py retries it).
        headers = {
            "Retry-After": decision.headers["Retry-After"],
            "X-RateLimit-Global": "true",
            "X-RateLimit-Scope": "global",
            "Via": "1.1 google",
        }
        body = {"message": "You are being rate limited.", "retry_after": retry_after, "global": True}
        return json_response(body, status=429, headers=headers)

    def _take_bucket(self, request: web.Request) -> BucketDecision:
        route_name = request.match_info.route.name or f"{request.method} {request.match_info.route.resource}"
        channel_id = self._channel_bucket_owner(request, route_name)
        if channel_id is not None and self.rate_limit is not None:
            return self.limiter.take(
                name="channel_messages",
                resource_id=channel_id,
                limit=self.rate_limit.limit,
                window_s=self.rate_limit.window_s * self.time_scale,
                bucket_hash=_bucket_hash(route_name),
            )
        major = request.match_info.get("channel_id") or request.match_info.get("interaction_id") or "0"
        return self.limiter.take(
            name=route_name,
            resource_id=int(major) if major.isdigit() else 0,
            limit=GENERIC_BUCKET_LIMIT,
            window_s=GENERIC_BUCKET_WINDOW_S * self.time_scale,
            bucket_hash=_bucket_hash(route_name),
        )

    def _channel_bucket_owner(self, request: web.Request, route_name: str) -> int | None:
        if route_name in CHANNEL_BUCKET_ROUTES:
            return int(request.match_info["channel_id"])
        if route_name in WEBHOOK_BUCKET_ROUTES and self.rate_limit and self.rate_limit.webhooks_share_bucket:
            interaction = self.world.interactions_by_token.get(request.match_info.get("token", ""))
            return interaction.channel_id if interaction is not None else None
        return None

    # ---- messages -----------------------------------------------------------------------------

    async def store_message(
        self,
        *,
        channel_id: int,
        author_id: int,
        body: JSONDict,
        attachments: Sequence[JSONDict] = (),
        webhook_id: int | None = None,
        interaction_id: int | None = None,
        flags: int | None = None,
    ) -> StoredMessage:
        """Store a new message and dispatch MESSAGE_CREATE (ephemeral ones are never dispatched)."""
        channel = self.world.channels[channel_id]
        content = str(body.get("content") or "")
        allowed_mentions = body.get("allowed_mentions")
        message = StoredMessage(
            id=self.world.ids.next(),
            channel_id=channel_id,
            guild_id=channel.guild_id,
            author_id=author_id,
            versions=[
                MessageVersion(
                    content=content,
                    embeds=tuple(body.get("embeds") or ()),
                    components=tuple(body.get("components") or ()),
                    flags=int(body.get("flags") or 0) if flags is None else flags,
                    at=time.time(),
                )
            ],
            attachments=list(attachments),
            allowed_mentions=allowed_mentions,
            message_reference=_normalise_reference(body.get("message_reference")),
            mention_user_ids=self.world.mentioned_user_ids(content, allowed_mentions),
            mention_everyone=self.world.pings_everyone(content, allowed_mentions),
            webhook_id=webhook_id,
            interaction_id=interaction_id,
        )
        self.world.messages[message.id] = message
        if not message.ephemeral:
            channel.last_message_id = message.id
            await self.dispatch_message("MESSAGE_CREATE", message)
        return message

    async def edit_message(self, message: StoredMessage, body: JSONDict, *, flags: int | None = None) -> StoredMessage:
        """Append an edited version (absent fields keep their value) and dispatch MESSAGE_UPDATE."""
        current = message.versions[-1]
        content = str(body["content"] or "") if "content" in body else current.content
        if "allowed_mentions" in body:
            message.allowed_mentions = body["allowed_mentions"]
        message.mention_user_ids = self.world.mentioned_user_ids(content, message.allowed_mentions)
        message.mention_everyone = self.world.pings_everyone(content, message.allowed_mentions)
        message.versions.append(
            MessageVersion(
                content=content,
                embeds=tuple(body["embeds"] or ()) if "embeds" in body else current.embeds,
                components=tuple(body["components"] or ()) if "components" in body else current.components,
                flags=flags if flags is not None else current.flags,
                at=time.time(),
            )
        )
        if not message.ephemeral:
            await self.dispatch_message("MESSAGE_UPDATE", message)
        return message

    async def dispatch_message(self, event: str, message: StoredMessage) -> None:
        if not self.world.bot_may_read(message.channel_id):
            return  # Discord sends a bot no events of a channel it may not view
        full = message_payload(self.world, message, for_gateway=True)
        mentions_bot = self.world.bot_user_id in message.mention_user_ids

        def for_session(session: GatewaySession) -> JSONDict | None:
            in_guild = message.guild_id is not None
            if not session.has_intent(INTENT_GUILD_MESSAGES if in_guild else INTENT_DIRECT_MESSAGES):
                return None
            own = message.author_id == self.world.bot_user_id
            if not in_guild or own or mentions_bot or session.has_intent(INTENT_MESSAGE_CONTENT):
                return full
            # Without MESSAGE_CONTENT, Discord blanks guild text that does not mention the bot.
            return {**full, "content": "", "embeds": [], "attachments": [], "components": []}

        await self.hub.dispatch(event, for_session)

    def message_in_channel(self, channel_id: int, message_id: int) -> StoredMessage | None:
        message = self.world.messages.get(message_id)
        if message is None or message.deleted or message.channel_id != channel_id:
            return None
        return message


def _normalise_reference(reference: JSONDict | None) -> JSONDict | None:
    # Clients may send ids as numbers; Discord stores and echoes snowflakes as strings.
    if not reference:
        return None
    return {k: str(v) if k.endswith("_id") and v is not None else v for k, v in reference.items()}


def is_ephemeral(body: JSONDict) -> bool:
    return bool(int(body.get("flags") or 0) & EPHEMERAL_FLAG)
