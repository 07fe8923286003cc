"""API errors as JSON: a status, a sentence and a kind, in the OpenAI error shape so its clients read them too."""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web


class ApiError(Exception):
    """A request the API refuses; never a traceback, always a sentence and a kind."""

    def __init__(self, status: int, message: str, kind: str, *, headers: Mapping[str, str] | None = None,
                 extra: Mapping[str, object] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.kind, "code": self.kind, **self.extra}}

    def response(self) -> web.Response:
        return web.json_response(self.body(), status=self.status, headers=self.headers)


def bad_request(message: str, kind: str = "invalid_request") -> ApiError:
    return ApiError(400, message, kind)
