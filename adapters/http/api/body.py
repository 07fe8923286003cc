"""Reading a request body: size-capped JSON object, parsed within bounds, and typed field checks that say what is wrong."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, TypeVar

from aiohttp import web

from adapters.http.api.errors import ApiError, bad_request

T = TypeVar("T")

# Deeper than any request the API takes (a tool schema is the deepest): refused before anything walks it.
MAX_DEPTH = 64
# An integer longer than this is no count or id we take; int() of a long digit string is quadratic.
MAX_INT_DIGITS = 100
# A body this large is parsed in a worker thread, so the loop keeps serving while the C parser runs.
THREAD_PARSE_BYTES = 64 * 1024
# A lone surrogate can only come from a `\ud800`-style escape: valid UTF-8 carries none.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# The ids a client hands back (ours are UUIDs and `call_…` names): bounded, printable, and storable, so a hostile one
# is refused here with its field's name instead of failing the lookup in Postgres (a NUL fails any text parameter).
ID_FIELDS = frozenset({"conversation_id", "continuation_id", "call_id", "tool_call_id", "stream_id"})
ID_MAX_CHARS = 200
_NOT_IN_ID = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


class _Refused(ValueError):
    """A value the parser met that the API refuses; its sentence is the 400's."""


async def read_json(request: web.Request, *, max_bytes: int) -> dict[str, Any]:
    """The body as a JSON object; 413 past the cap (read no further), 400 when it is not a JSON object or passes
    a bound (nesting, integer length, a lone surrogate)."""
    if request.content_length is not None and request.content_length > max_bytes:
        raise _too_large(max_bytes)
    raw = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        raw.extend(chunk)
        if len(raw) > max_bytes:
            raise _too_large(max_bytes)
    data = bytes(raw)
    value = await asyncio.to_thread(parse, data) if len(data) > THREAD_PARSE_BYTES else parse(data)
    if not isinstance(value, dict):
        raise bad_request("The body must be a JSON object.", "invalid_json")
    return value


def parse(raw: bytes) -> Any:
    """JSON within the API's bounds, or the ApiError (400) that names the bound; linear in the body's size."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request("The body is not valid UTF-8 JSON.", "invalid_json") from None
    if not text:
        return None
    # Counting openers is one C scan: a body with few of them cannot nest deeply, and is not walked for depth.
    may_nest = raw.count(b"[") + raw.count(b"{") > MAX_DEPTH
    may_surrogate = _SURROGATE_ESCAPE.search(raw) is not None
    try:
        value = json.loads(text, parse_int=_int, parse_constant=_constant)
    except _Refused as refused:
        raise bad_request(str(refused), "invalid_json") from None
    except RecursionError:
        raise _too_deep() from None
    except (json.JSONDecodeError, ValueError):
        raise bad_request("The body is not valid JSON.", "invalid_json") from None
    if may_nest or may_surrogate:
        _check(value, depth=may_nest, surrogates=may_surrogate)
    return value


def _int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"The body has an integer of more than {MAX_INT_DIGITS} digits.")
    return int(digits)


def _constant(name: str) -> float:
    raise _Refused(f"The body has {name}, which is not JSON.")


def _check(value: Any, *, depth: bool, surrogates: bool) -> None:
    """Walk the parsed value without recursion: 400 past MAX_DEPTH, or for a string with a lone surrogate."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            if depth and level > MAX_DEPTH:
                raise _too_deep()
            for name, child in item.items():
                if surrogates and _SURROGATE.search(name):
                    raise _lone_surrogate()
                stack.append((child, level + 1))
        elif isinstance(item, list):
            if depth and level > MAX_DEPTH:
                raise _too_deep()
            stack.extend((child, level + 1) for child in item)
        elif surrogates and isinstance(item, str) and _SURROGATE.search(item):
            raise _lone_surrogate()


def _too_deep() -> ApiError:
    return bad_request(f"The body nests deeper than {MAX_DEPTH} levels.", "invalid_json")


def _lone_surrogate() -> ApiError:
    return bad_request("The body has a string with a lone UTF-16 surrogate (such as \\ud800), which is not text.",
                       "invalid_json")


def _too_large(max_bytes: int) -> ApiError:
    return ApiError(413, f"The body is larger than {max_bytes} bytes.", "body_too_large")


def field(body: dict[str, Any], name: str, kind: type[T] | tuple[type, ...], *, required: bool = False,
          default: Any = None) -> Any:
    """body[name] when it is of `kind`; 400 naming the field otherwise (bool is never taken for int). A string
    field named in ID_FIELDS must also be an id (see `identifier`)."""
    if name not in body or body[name] is None:
        if required:
            raise bad_request(f"`{name}` is required.")
        return default
    value = body[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise bad_request(f"`{name}` must be {names}.")
    if name in ID_FIELDS and isinstance(value, str):
        return identifier(value, name)
    return value


def identifier(value: str, name: str) -> str:
    """`value` when it can be an id: 1 to ID_MAX_CHARS characters, no control character or lone surrogate; a 400
    naming `name` otherwise."""
    if not value or len(value) > ID_MAX_CHARS or _NOT_IN_ID.search(value) is not None:
        raise bad_request(f"`{name}` is not an id: ids are 1 to {ID_MAX_CHARS} characters, with no control "
                          "character or lone surrogate.", "invalid_id")
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
