"""Credentials out of what we print: URLs without user:password@ or secret parameters, known secret values masked."""

from __future__ import annotations

import logging
import re
from typing import Iterable
from urllib.parse import parse_qsl, quote, unquote

MASK = "***"
# Shorter values are too likely to occur in ordinary text to be masked wherever they appear.
MIN_SECRET_CHARS = 6

# Query parameters that carry a credential (libpq's, and the usual API-key spellings).
SECRET_PARAMS = frozenset(
    {
        "password", "sslpassword", "passwd", "pwd", "pass",
        "api_key", "apikey", "api-key", "key", "access_key", "secret", "client_secret",
        "token", "access_token", "auth", "auth_token", "refresh_token", "sig", "signature",
        "x-amz-signature", "x-amz-credential", "x-goog-signature",
    }
)
_PARAM_NAMES = "|".join(re.escape(name) for name in sorted(SECRET_PARAMS, key=len, reverse=True))
_QUERY_SECRET = re.compile(rf"(?i)([?&;](?:{_PARAM_NAMES})=)[^&#;\s\"']*")
# A URL inside free text: a scheme, `://`, then anything up to whitespace or a quote.
_URL_IN_TEXT = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s\"'<>`]+")
# libpq keyword/value connection strings and `name=value` pairs in messages: password=… and the like.
_KEYWORD_SECRET = re.compile(
    r"(?i)\b((?:ssl)?password|passwd|api_key|apikey|access_token|auth_token|client_secret)([\"']?\s*[=:]\s*)"
    r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s,;&]+?(?=[.,:;!?)\]}]*(?:[\s,;&]|$)))"
)
# Tokens by their documented shape, for those the process was never given but holds (Slack's stored installs: bot,
# user, refresh and app tokens; a Discord bot token's three dot-separated parts).
_TOKEN_SHAPES = re.compile(
    r"\b(?:xox[abpre]|xapp)-[A-Za-z0-9-]{8,}|\b[A-Za-z0-9_-]{24,28}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,}"
)
_MASK_VALUE = rf"\1{MASK}"
_MASK_PAIR = rf"\1\2{MASK}"


def redact_url(url: str) -> str:
    """The URL with its user:password@ and secret query parameters replaced by ***; anything else as written."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _KEYWORD_SECRET.sub(_MASK_PAIR, url)
    # The authority ends where the path, query or fragment begins (RFC 3986).
    end = min((index for index in (rest.find(ch) for ch in "/?#") if index >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        authority = f"{MASK}@{authority.rpartition('@')[2]}"
    return f"{scheme}://{authority}{_QUERY_SECRET.sub(_MASK_VALUE, tail)}"


def url_secrets(url: str | None) -> tuple[str, ...]:
    """The credentials written in a URL (password, user, secret parameters), as written and decoded."""
    if not url or "://" not in url:
        return ()
    rest = url.partition("://")[2]
    end = min((index for index in (rest.find(ch) for ch in "/?#") if index >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    found: list[str] = []
    if "@" in authority:
        userinfo = authority.rpartition("@")[0]
        user, colon, password = userinfo.partition(":")
        if password:
            found.extend((password, userinfo))
        elif not colon and user and not url.lower().startswith(("postgres://", "postgresql://")):
            # An API URL's user alone may be a token (https://TOKEN@host); a database's user is a name.
            found.append(user)
    query = tail.partition("?")[2].partition("#")[0]
    found.extend(value for name, value in parse_qsl(query, keep_blank_values=False) if name.lower() in SECRET_PARAMS)
    variants = {form for value in found for form in (value, unquote(value), quote(value, safe=""))}
    return tuple(sorted(variants, key=len, reverse=True))


def redact_text(text: str, *, secrets: Iterable[str] = ()) -> str:
    """Text with known secret values masked, every URL in it redacted, and password=… pairs masked."""
    # Longest first, so a secret containing another is masked whole.
    for secret in sorted({value for value in secrets if len(value) >= MIN_SECRET_CHARS}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _URL_IN_TEXT.sub(_redact_url_match, text)
    text = _TOKEN_SHAPES.sub(MASK, text)
    return _KEYWORD_SECRET.sub(_MASK_PAIR, text)


def _redact_url_match(match: re.Match[str]) -> str:
    # Punctuation closing a sentence ("at http://host/v1: refused") is the text's, not the URL's.
    url = match.group(0)
    body = url.rstrip(".,:;!?)]}")
    return redact_url(body) + url[len(body) :]


def error_reason(error: BaseException, *, url: str) -> str:
    """An error's message on one line for a sentence about `url`: the URL itself and its credentials left out."""
    # psycopg's messages span lines and start with "connection failed: ", which the sentence around says already.
    reason = " ".join(str(error).split()).removeprefix("connection failed: ")
    return redact_text(reason.replace(url, "the URL"), secrets=url_secrets(url)) or type(error).__name__


class RedactingFormatter(logging.Formatter):
    """A log formatter whose every line — message, arguments and traceback — goes through redact_text."""

    def __init__(self, fmt: str | None = None, *, secrets: Iterable[str] = ()) -> None:
        super().__init__(fmt)
        self._secrets: tuple[str, ...] = tuple(secrets)

    def add_secrets(self, secrets: Iterable[str]) -> None:
        """Mask these values too, from now on (settings are read after logging is set up)."""
        self._secrets = tuple({*self._secrets, *secrets})

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record), secrets=self._secrets)
