"""Discord's HTTP below discord.py: no blind re-send of any request, and which of Discord's errors are permanent.

discord.py's HTTPClient (and its webhook adapter, which interaction responses and followups use, on the
same aiohttp session) re-sends every request on 500/502/504/524 up to five times, and after a connection
reset. A POST that Discord carried out before answering 5xx would then be done again: a second message,
thread or followup; and every re-send sleeps 1 + 2·tries real seconds, outside our budgets and their caps.
The trace below stops that for every method: a 5xx and a dropped connection come out as `OutcomeUnknown`,
and the caller retries with its own paced, capped backoff (an edit or a read is sent again as it was; a
POST is looked up first, adapters/discord/transport_calls.py)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable
from types import SimpleNamespace
from typing import TypeVar

import aiohttp
import discord

from adapters.streaming import CONNECTION_ERRORS, RateLimited, TransientSendError, classify_failure, parse_retry_after
from adapters.streaming.transport import PermanentSendError

T = TypeVar("T")

# What discord.py re-sends unconditionally (discord/http.py, "unconditional retry").
RESENT_STATUSES = frozenset({500, 502, 503, 504, 524})

# Discord's JSON error codes that say a call can never succeed for that channel or message.
UNKNOWN_CHANNEL = 10003
UNKNOWN_MESSAGE = 10008
MISSING_ACCESS = 50001
# The bot lacks a permission now; an admin may grant it, so it is retried with backoff.
MISSING_PERMISSIONS = 50013


class OutcomeUnknown(TransientSendError):
    """A failure after which the platform may have done the work (a 5xx, a dropped connection, a timeout).

    Retryable, but a non-idempotent call is looked up before it is sent again."""


class NotResent(aiohttp.ClientError):
    """Raised inside discord.py's request loop to end it: a request whose reply never came (a reset connection).

    Not an OSError, so discord.py's loop lets it through instead of sending the request again (an
    aiohttp.ClientError, which its gateway's reconnect loop already backs off on)."""

    def __init__(self, method: str, url: str) -> None:
        self.method = method
        super().__init__(f"{method} {url}: connection lost")


class ServerErrorNotResent(discord.DiscordServerError):
    """Raised inside discord.py's request loop to end it: a request answered 5xx. The error discord.py itself
    raises for a 5xx after its last try, so a caller without `guarded` (which catches discord.HTTPException)
    reads it as before; not an OSError, so the loop lets it through."""


def no_blind_resend(trace: aiohttp.TraceConfig) -> aiohttp.TraceConfig:
    """Adds to `trace` (the one given to discord.Client as http_trace) the rule: a request is sent once."""

    async def on_request_end(
        session: aiohttp.ClientSession, context: SimpleNamespace, params: aiohttp.TraceRequestEndParams
    ) -> None:
        response = params.response
        if response.status in RESENT_STATUSES:
            response.close()
            raise ServerErrorNotResent(response, f"{params.method} {params.url} answered {response.status}")

    async def on_request_exception(
        session: aiohttp.ClientSession, context: SimpleNamespace, params: aiohttp.TraceRequestExceptionParams
    ) -> None:
        # discord.py re-sends after a connection reset (an OSError); a POST may have arrived.
        if isinstance(params.exception, OSError):
            raise NotResent(params.method, str(params.url)) from params.exception

    trace.on_request_end.append(on_request_end)
    trace.on_request_exception.append(on_request_exception)
    return trace


_permanent_types: dict[type[discord.HTTPException], type[discord.HTTPException]] = {}


def as_permanent(exc: discord.HTTPException) -> discord.HTTPException:
    """The same error, also a PermanentSendError (the shared rule's mark), still the discord.py type it was
    (NotFound, Forbidden …) for callers that tell those apart."""
    if isinstance(exc, PermanentSendError):
        return exc
    kind = type(exc)
    marked = _permanent_types.get(kind)
    if marked is None:
        marked = _permanent_types[kind] = type(f"Permanent{kind.__name__}", (kind, PermanentSendError), {})
    error = marked.__new__(marked)
    error.__dict__.update(exc.__dict__)
    error.args = exc.args
    # PermanentSendError's own fields; `code` stays discord.py's number, which callers compare.
    error.team_wide = exc.status == 401  # type: ignore[attr-defined]
    return error


def is_permanent(*, status: int, code: int) -> bool:
    """Discord's documented "never" for a call: the channel or message is gone, the bot has no access
    there, or the request itself is malformed. Missing Permissions is not: it can be granted."""
    if status == 403:
        return code != MISSING_PERMISSIONS
    return status in (400, 401, 404, 405, 413)


# Discord's global limit is per second: a global 429 asks for well under this.
GLOBAL_LOCK_REPAIR_S = 1.0
_watched_http: weakref.WeakSet[discord.http.HTTPClient] = weakref.WeakSet()


def watch_global_lock(http: discord.http.HTTPClient) -> None:
    """Lets `guarded` repair this client's global rate-limit lock after a cancelled call.

    discord.py clears the lock before sleeping out a global 429 and sets it again after; a request
    cancelled in that sleep (the streamer cancels an edit its ending overtakes) never sets it, and
    every later request of the bot would wait on it for good."""
    _watched_http.add(http)


def _repair_global_locks_soon() -> None:
    loop = asyncio.get_running_loop()
    for http in list(_watched_http):
        lock = getattr(http, "_global_over", None)
        if isinstance(lock, asyncio.Event) and not lock.is_set():
            # Set early at worst: a request sent during a real global limit gets a 429 and waits again.
            loop.call_later(GLOBAL_LOCK_REPAIR_S, lock.set)


async def guarded(call: Awaitable[T]) -> T:
    """Awaits a discord.py call, turning 429s into RateLimited, failures after which Discord may have done
    the work (5xx, a lost connection) into OutcomeUnknown and other retryable ones (Missing Permissions)
    into TransientSendError; the errors Discord documents as permanent pass through as they are."""
    try:
        return await call
    except asyncio.CancelledError:
        _repair_global_locks_soon()
        raise
    except discord.RateLimited as exc:
        raise RateLimited(exc.retry_after, "Discord rate limit") from exc
    except discord.HTTPException as exc:
        # Discord says a limit's scope: only a route's own ("user") limit leaves the bot-wide budget alone.
        scope = str(_header(exc, "X-RateLimit-Scope") or "").lower()
        wide = scope != "user" or str(_header(exc, "X-RateLimit-Global") or "").lower() == "true"
        failure = classify_failure(
            status=exc.status, retry_after_s=parse_retry_after(_header(exc, "Retry-After")),
            detail=f"Discord answered {exc.status}", wide=wide,
        )
        if isinstance(failure, TransientSendError):
            raise OutcomeUnknown(f"Discord answered {exc.status}") from exc
        if failure is not None:
            raise failure from exc
        if is_permanent(status=exc.status, code=exc.code):
            raise as_permanent(exc) from exc
        raise TransientSendError(f"Discord answered {exc.status} (code {exc.code})") from exc
    except CONNECTION_ERRORS as exc:
        raise OutcomeUnknown(f"Discord unreachable: {exc!r}") from exc
    except RuntimeError as exc:
        # aiohttp refuses a request on a session the client closed (shutting down): nothing was sent, so it is
        # "later" (the outbox keeps a final), not a failure to log with a traceback.
        if "Session is closed" in str(exc):
            raise TransientSendError("the Discord session is closed (the bot is stopping)") from exc
        raise


def _header(exc: discord.HTTPException, name: str) -> object:
    headers = getattr(exc.response, "headers", None)
    return headers.get(name) if headers is not None else None
