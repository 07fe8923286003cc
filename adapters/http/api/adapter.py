"""The API as a platform adapter ("api"): adds its routes to the process's HTTP server and turns every refusal into JSON."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from adapters.http.api.answer_routes import AnswerRoutes
from adapters.http.api.answers import ApiAnswers
from adapters.http.api.errors import ApiError
from adapters.http.api.openai_routes import OpenAIRoutes
from adapters.http.api.streams import StreamHub
from core.api_access import ApiConversationLog, ApiKeys, EventLog
from core.engine import Engine

log = logging.getLogger(__name__)

PREFIXES = ("/api/", "/v1/")
# A stream whose tools run longer than this sends a comment, so proxies and clients keep the connection.
KEEPALIVE_S = 10.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiAdapter:
    platform = "api"

    def __init__(
        self, *, engine: Engine, keys: ApiKeys, conversations: ApiConversationLog, journal: EventLog,
        max_body_bytes: int, keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self.answers = ApiAnswers(engine=engine, keys=keys, conversations=conversations)
        self.hub = StreamHub(journal)
        self._routes = [
            AnswerRoutes(answers=self.answers, hub=self.hub, max_body_bytes=max_body_bytes, keepalive_s=keepalive_s),
            OpenAIRoutes(answers=self.answers, hub=self.hub, max_body_bytes=max_body_bytes, keepalive_s=keepalive_s),
        ]
        self._accepting = True

    def add_to(self, app: web.Application) -> None:
        """Routes and the error middleware; before the server starts."""
        app.middlewares.append(self._errors)
        for routes in self._routes:
            routes.add_to(app)

    def stop_accepting(self) -> None:
        self._accepting = False

    async def close(self) -> None:
        await self.hub.close()

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith(PREFIXES):
            return await handler(request)
        try:
            if not self._accepting:
                raise ApiError(503, "The server is shutting down; try again in a moment.", "unavailable")
            return await handler(request)
        except ApiError as error:
            return error.response()
        except web.HTTPException as error:
            # aiohttp's own (404 route, 405 method): the same JSON shape as ours.
            if error.status < 400:
                raise
            return ApiError(error.status, error.reason, "http_error").response()
        except Exception:
            log.exception("API request %s %s failed", request.method, request.path)
            return ApiError(500, "The server failed to handle this request.", "server_error").response()
