"""read_url: fetch a page or document through the URL guard and return its main text, cited as a source."""

from __future__ import annotations

import functools
import html
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from yarl import URL

from core.cpu_work import in_worker
from core.events import SourceItem
from core.retrieval.loaders import LoadedDocument, document_from_fetch
from core.retrieval.url_guard import FetchError, fetch_url
from core.sources import SNIPPET_CHARS, SourceCollector
from core.tools.context import ToolContext
from core.tools.registry import ToolError, ToolSpec

if TYPE_CHECKING:
    from core.config import Settings

SOURCE_NAME = "web"
# Characters of a document returned per call: with the header and the note it stays under the
# agent's per-result cap (about 2000 tokens), so the executor never cuts the middle out of a page.
WINDOW_CHARS = 6000
MAX_OUTPUT_CHARS = 7000
# Extraction of a large page runs after the fetch, inside the same tool timeout.
EXTRACTION_GRACE_S = 15.0

# A URL in chat text: Slack sends <https://…|label> and <https://…>, Discord <https://…> or bare
# links, Markdown [label](https://…). The wrappers and separators are never part of the URL.
_URL_RE = re.compile(r"https?://[^\s<>\"'`|\\]+", re.IGNORECASE)
_TRAILING_PUNCTUATION = ".,;:!?*_~"
_CLOSERS = {")": "(", "]": "[", "}": "{"}
_TAIL_CHARS = _TRAILING_PUNCTUATION + "".join(_CLOSERS)
# The asker's text is looked through up to here (a URL written past it needs approval like any other),
# and at most this many URLs of it count: the check runs on every read_url call, over text anyone can send.
MAX_SCAN_CHARS = 100_000
MAX_VOUCHED_URLS = 500


def _trim(url: str) -> str:
    """url without the punctuation after it and the closing brackets it did not open.

    The same as stripping one character at a time from the end while it is punctuation or a closer
    with more closers than openers in what is left, but in a few linear scans however long the tail is.
    """
    body = url.rstrip(_TAIL_CHARS)
    tail = url[len(body) :]
    keep = 0  # characters of the tail kept: up to the last closer that closes a bracket opened in the URL
    for closer, opener in _CLOSERS.items():
        # Closers of brackets opened before the URL (Markdown's "(…)"): stripped from the end, this many.
        unmatched = max(url.count(closer) - url.count(opener), 0)
        if tail.count(closer) > unmatched:
            # Counting back from the end, the one after those closes a bracket inside the URL: kept, and all before it.
            head = tail.rsplit(closer, unmatched + 1)[0]
            keep = max(keep, len(head) + 1)
    return body + tail[:keep]


def urls_in_text(text: str, *, limit: int | None = None) -> list[str]:
    """The http(s) URLs written in a chat message, in order, without the punctuation around them (at most `limit`)."""
    # Slack escapes &, < and > in message text (also inside links).
    found = []
    for match in _URL_RE.finditer(html.unescape(text)):
        url = _trim(match.group(0))
        if url:
            found.append(url)
            if limit is not None and len(found) >= limit:
                break
    return found


def normalise_url(raw: str) -> str | None:
    """One spelling per address (scheme and host case, default port, empty path, no fragment); None if not http(s).

    Never raises: text a page or a person wrote ends here, and a URL that cannot be spelt is simply not one.
    """
    try:
        url = URL(raw.strip())
        if url.scheme not in ("http", "https") or not url.raw_host:
            return None
        return str(
            URL.build(
                scheme=url.scheme,
                user=url.raw_user,
                password=url.raw_password,
                host=url.host_subcomponent or "",  # an IPv6 literal keeps its brackets
                port=None if url.is_default_port() else url.port,
                path=url.raw_path or "/",
                query_string=url.raw_query_string,
                encoded=True,
            )
        )
    except (ValueError, TypeError, UnicodeError):
        return None


@functools.lru_cache(maxsize=16)
def _written_urls(scanned: str) -> frozenset[str]:
    # Cached: every read_url call of a run asks about the same question.
    named = urls_in_text(scanned, limit=MAX_VOUCHED_URLS)
    return frozenset(url for url in map(normalise_url, named) if url is not None)


def vouched_urls(ctx: ToolContext) -> set[str]:
    """URLs a person vouched for: written in the asker's own message, or already a source of this run."""
    vouched = set(_written_urls(ctx.question[:MAX_SCAN_CHARS]))
    if ctx.sources is not None:
        cited = (normalise_url(item.uri) for item in ctx.sources.items if item.uri)
        vouched.update(url for url in cited if url is not None)
    return vouched


def needs_approval(ctx: ToolContext, arguments: dict[str, Any]) -> bool:
    """Text a page injected could name a URL that carries data out in its path or query: only URLs the
    asker wrote or that are already cited run without a person's approval."""
    url = normalise_url(str(arguments.get("url", "")))
    return url is None or url not in vouched_urls(ctx)


@dataclass(frozen=True, kw_only=True)
class _Read:
    document: LoadedDocument
    cut_at_bytes: int | None  # the body was cut at this many bytes


# One cache per run: keyed by the run's SourceCollector, so it lives exactly as long as the run
# does and a page read twice in a run is fetched once. Failures are not cached (a retry may work).
_CACHES: weakref.WeakKeyDictionary[SourceCollector, dict[str, _Read]] = weakref.WeakKeyDictionary()


def _cache(ctx: ToolContext) -> dict[str, _Read]:
    if ctx.sources is None:
        return {}
    return _CACHES.setdefault(ctx.sources, {})


@dataclass(frozen=True, kw_only=True)
class ReadUrlConfig:
    """How read_url fetches: which private networks it may reach, and its size and time caps."""

    allowed_networks: Sequence[str] = ()
    max_bytes: int = 2_000_000
    timeout_s: float = 15.0

    @classmethod
    def from_settings(cls, settings: Settings) -> ReadUrlConfig:
        return cls(
            allowed_networks=settings.read_url_allowed_networks,
            max_bytes=settings.read_url_max_bytes,
            timeout_s=settings.read_url_timeout_s,
        )


async def _fetch(url: str, config: ReadUrlConfig) -> _Read:
    try:
        resource = await fetch_url(
            url,
            allowed_networks=config.allowed_networks,
            max_bytes=config.max_bytes,
            timeout_s=config.timeout_s,
            cut_text=True,
        )
        # HTML extraction and PDF or Office parsing are CPU work; keep them off the event loop.
        document = await in_worker(document_from_fetch, resource)
    except FetchError as error:
        raise ToolError(str(error)) from None
    return _Read(document=document, cut_at_bytes=config.max_bytes if resource.truncated else None)


def _render(read: _Read, number: int | None, url: str, start: int) -> str:
    document = read.document
    text = document.text
    if start >= len(text):
        return f"{url} has {len(text)} characters of text; start={start} is past its end."
    window = text[start : start + WINDOW_CHARS]
    cite = f"[{number}] " if number is not None else ""
    lines = [f"{cite}{document.title} ({url})"]
    if start:
        lines.append(f"(characters {start}–{start + len(window)} of {len(text)})")
    lines.append("")
    lines.append(window)
    notes = []
    end = start + len(window)
    if end < len(text):
        more = len(text) - end
        notes.append(f"The text goes on for {more} more characters: call read_url with start={end} to read on.")
    if read.cut_at_bytes is not None:
        notes.append(f"The page is larger than {read.cut_at_bytes} bytes; only its beginning was read.")
    if number is not None:
        notes.append(f"Cite it as [{number}].")
    if notes:
        lines.append("")
        lines.append(" ".join(notes))
    return "\n".join(lines)


def read_url_tool(config: ReadUrlConfig = ReadUrlConfig()) -> ToolSpec:
    """The read_url tool with these fetch settings."""

    async def run(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        url = str(arguments["url"]).strip()
        key = normalise_url(url)
        if key is None:
            raise ToolError(f"{url!r} is not an http or https URL.")
        cache = _cache(ctx)
        read = cache.get(key)
        if read is None:
            read = await _fetch(url, config)
            cache[key] = read
        number = None
        if ctx.sources is not None:
            # One source per URL whichever part was read: the same title and opening text each time.
            item = SourceItem(
                title=read.document.title, uri=url, text=read.document.text[:SNIPPET_CHARS], source=SOURCE_NAME
            )
            number = ctx.sources.add([item])[0]
        return _render(read, number, url, int(arguments.get("start", 0)))

    return ToolSpec(
        name="read_url",
        description=(
            "Fetch a web page or document (HTML, PDF, Word, PowerPoint, Excel, text) by its http(s) URL and "
            "return its main text, numbered as a source to cite as [n]. Long texts come in parts: pass start "
            "to read on. URLs that the user did not write need a person's approval."
        ),
        parameters={
            "type": "object",
            "properties": {
                "url": {"type": "string", "minLength": 1, "description": "The full http(s) URL to read."},
                "start": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Character offset to read from, for the next part of a long text (default 0).",
                },
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        run=run,
        approval_rule=needs_approval,
        timeout_s=config.timeout_s + EXTRACTION_GRACE_S,
        max_output_chars=MAX_OUTPUT_CHARS,
    )
