"""Reading a request body: size-capped JSON object, and typed field checks that say what is wrong."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from aiohttp import web

from adapters.http.api.errors import ApiError, bad_request

T = TypeVar("T")


async def read_json(request: web.Request, *, max_bytes: int) -> dict[str, Any]:
    """The body as a JSON object; 413 past the cap (read no further), 400 when it is not a JSON object."""
    if request.content_length is not None and request.content_length > max_bytes:
        raise _too_large(max_bytes)
    raw = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        raw.extend(chunk)
        if len(raw) > max_bytes:
            raise _too_large(max_bytes)
    try:
        value = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise bad_request("The body is not valid JSON.", "invalid_json") from None
    if not isinstance(value, dict):
        raise bad_request("The body must be a JSON object.", "invalid_json")
    return value


def _too_large(max_bytes: int) -> ApiError:
    return ApiError(413, f"The body is larger than {max_bytes} bytes.", "body_too_large")


def field(body: dict[str, Any], name: str, kind: type[T] | tuple[type, ...], *, required: bool = False,
          default: Any = None) -> Any:
    """body[name] when it is of `kind`; 400 naming the field otherwise (bool is never taken for int)."""
    if name not in body or body[name] is None:
        if required:
            raise bad_request(f"`{name}` is required.")
        return default
    value = body[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise bad_request(f"`{name}` must be {names}.")
    return value


def string_list(body: dict[str, Any], name: str) -> tuple[str, ...] | None:
    value = field(body, name, list)
    if value is None:
        return None
    if not all(isinstance(item, str) and item for item in value):
        raise bad_request(f"`{name}` must be a list of names.")
    return tuple(value)


_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list", dict: "an object",
               float: "a number"}
