"""Checks of one setting's value (database URLs, URLs, model overrides, comma lists): each ValueError says what is wrong, never the value."""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import urlsplit

from psycopg import conninfo

from core.redact import error_reason

DATABASE_SCHEMES = ("postgresql", "postgres")
HTTP_SCHEMES = ("http", "https")
WEBSOCKET_SCHEMES = ("ws", "wss")
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-]*)://")


def check_database_url(value: str) -> str:
    """DATABASE_URL as psycopg will read it, or ValueError with a reason that never repeats the value."""
    scheme = _SCHEME.match(value)
    if scheme is None:
        raise ValueError("it is not a URL")
    if scheme.group(1) not in DATABASE_SCHEMES:
        # The scheme is the only part safe to repeat; a driver suffix (postgresql+psycopg) is what people paste.
        raise ValueError(f"its scheme is {scheme.group(1)}://, not postgresql:// or postgres://")
    try:
        options = conninfo.conninfo_to_dict(value)
    except Exception as error:  # libpq's reason may quote the URL, password included
        raise ValueError(f"psycopg cannot read it: {error_reason(error, url=value)}") from None
    for port in str(options.get("port") or "").split(","):
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError("its port is not a number between 1 and 65535")
    return value


def check_url(value: str, *, schemes: tuple[str, ...]) -> str:
    """A URL with one of the schemes, a host and a numeric port if any; ValueError says which part is wrong."""
    parts = urlsplit(value)
    if not parts.scheme or "://" not in value:
        raise ValueError("it is not a URL")
    if parts.scheme not in schemes:
        raise ValueError(f"its scheme is {parts.scheme}://, not {' or '.join(scheme + '://' for scheme in schemes)}")
    try:
        parts.port  # reading it is what checks it
    except ValueError:
        raise ValueError("its port is not a number between 0 and 65535") from None
    if not parts.hostname:
        raise ValueError("it has no host name")
    return value


MODEL_OVERRIDE_INTS = ("context_limit", "max_output_tokens")
MODEL_OVERRIDE_BOOLS = ("supports_tools", "supports_structured_output", "supports_vision")
FLAG_WORDS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
# Larger than any model's window; past it a typo (an extra zero or three) is likelier than a model.
MODEL_OVERRIDE_MAX_TOKENS = 100_000_000


def check_model_overrides(value: dict[str, Any]) -> dict[str, Any]:
    """LLM_MODEL_OVERRIDES with whole positive token counts and true/false flags, or ValueError naming the key."""
    checked: dict[str, Any] = {}
    for key, item in value.items():
        if key in MODEL_OVERRIDE_BOOLS:
            if isinstance(item, str) and item.strip().lower() in FLAG_WORDS:
                item = FLAG_WORDS[item.strip().lower()]
            if not isinstance(item, bool):
                raise ValueError(f"{key} must be true or false")
            checked[key] = item
        elif key in MODEL_OVERRIDE_INTS:
            if isinstance(item, str) and item.strip().isdigit():
                item = int(item.strip())
            # JSON reads 1e309 as infinity and 5.0 as a float; a bool is an int to Python but not a count.
            whole = isinstance(item, int) or (isinstance(item, float) and math.isfinite(item) and item.is_integer())
            if isinstance(item, bool) or not whole or not 0 < item <= MODEL_OVERRIDE_MAX_TOKENS:
                raise ValueError(f"{key} must be a whole number of tokens between 1 and {MODEL_OVERRIDE_MAX_TOKENS:,}")
            checked[key] = int(item)
        else:
            raise ValueError(f"{key!r} is not an override; known: {', '.join(MODEL_OVERRIDE_INTS + MODEL_OVERRIDE_BOOLS)}")
    return checked


def split_commas(value: object) -> object:
    """A comma-separated setting as a tuple of its non-empty parts (a tuple given in code stays as it is)."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def optional_url(value: str | None, *, schemes: tuple[str, ...]) -> str | None:
    """An optional URL setting: empty means unset; otherwise check_url's checks."""
    return check_url(value.strip(), schemes=schemes) if value and value.strip() else None
