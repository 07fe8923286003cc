"""Fetch a URL (for ingestion and read_url) without letting it reach private networks (SSRF guard)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

MAX_REDIRECTS = 5
READ_CHUNK_BYTES = 64 * 1024
ALLOWED_SCHEMES = frozenset({"http", "https"})
# Content types that can be cut short and still read: a page or text that is too long is read up to the cap.
TEXT_CONTENT_TYPES = frozenset(
    {
        "text/html",
        "application/xhtml+xml",
        "text/plain",
        "text/markdown",
        "text/x-markdown",
        "text/x-rst",
        "text/prs.fallenstein.rst",
    }
)
# Content types the loaders can turn into text; anything else is refused before the body is read.
ALLOWED_CONTENT_TYPES = TEXT_CONTENT_TYPES | frozenset(
    {
        "application/pdf",
        "application/x-pdf",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    }
)
USER_AGENT = "relaybot/1.0"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class FetchError(Exception):
    """The URL could not be fetched; the message says why in a sentence a user can act on."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status when the server answered with an error (robots.txt reads it)


class UrlRefused(FetchError):
    """The URL was refused by policy (scheme, private address, size or content type)."""


@dataclass(frozen=True, kw_only=True)
class FetchedResource:
    """A fetched body with what is needed to turn it into text."""

    url: str
    final_url: str
    content_type: str
    charset: str | None
    body: bytes
    truncated: bool = False  # the body is the first max_bytes of a longer text (only when asked for)


def _unwrap(ip: IPAddress) -> IPAddress:
    """Return the IPv4 address hidden inside an IPv6 one (mapped, 6to4, Teredo), else ip."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip.teredo is not None:
            return ip.teredo[1]
    return ip


def address_refusal(
    ip: IPAddress, *, allow_private: bool, allowed_networks: Sequence[IPNetwork] = ()
) -> str | None:
    """Return why connecting to ip is refused, or None when it is allowed."""
    inner = _unwrap(ip)
    if inner.is_multicast or ip.is_multicast:
        return "a multicast address"
    if inner.is_unspecified or ip.is_unspecified:
        return "an unspecified address"
    if allow_private or any(ip in net or inner in net for net in allowed_networks):
        return None
    if inner.is_loopback:
        return "a loopback address"
    if inner.is_link_local or ip.is_link_local:
        return "a link-local address (this includes cloud metadata services)"
    if isinstance(inner, ipaddress.IPv6Address) and inner.is_site_local:
        # fec0::/10 is deprecated, but Python counts it as global; networks still route it privately.
        return "a private network address"
    if inner.is_reserved or ip.is_reserved:
        return "a reserved address"
    if not (inner.is_global and ip.is_global) or inner.is_private:
        return "a private network address"
    return None


def parse_networks(networks: Sequence[str]) -> tuple[IPNetwork, ...]:
    """Parse CIDR strings; a bad one raises ValueError naming it."""
    parsed: list[IPNetwork] = []
    for raw in networks:
        try:
            parsed.append(ipaddress.ip_network(raw.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{raw!r} is not a valid network (expected CIDR such as 10.1.0.0/16).") from None
    return tuple(parsed)


class _VettedResolver(AbstractResolver):
    """Answers aiohttp only with addresses already checked, so DNS is never consulted twice."""

    def __init__(self) -> None:
        self._vetted: dict[str, list[IPAddress]] = {}

    def remember(self, host: str, addresses: list[IPAddress]) -> None:
        self._vetted[host.lower()] = addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = self._vetted.get(host.lower())
        if not addresses:
            raise OSError(f"host {host} was not vetted before connecting")
        return [
            ResolveResult(
                hostname=host,
                host=str(ip),
                port=port,
                family=socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for ip in addresses
        ]

    async def close(self) -> None:
        self._vetted.clear()


async def _resolve_host(host: str, port: int) -> list[IPAddress]:
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise FetchError(f"The host {host} could not be found; check the URL.") from None
    addresses: list[IPAddress] = []
    for info in infos:
        # Scope ids ("fe80::1%eth0") are not part of the address itself.
        ip = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise FetchError(f"The host {host} has no addresses; check the URL.")
    return addresses


def _literal_address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


async def vet_url(
    url: URL,
    *,
    allow_private: bool,
    allowed_networks: Sequence[IPNetwork] = (),
    resolver: _VettedResolver | None = None,
) -> list[IPAddress]:
    """Check scheme and every address the host resolves to; raise UrlRefused on any bad one."""
    if url.scheme not in ALLOWED_SCHEMES:
        raise UrlRefused(f"Only http and https URLs can be fetched, not {url.scheme or 'this'}: {url}.")
    host = url.raw_host
    if not host:
        raise UrlRefused(f"The URL {url} has no host.")
    port = url.port or (443 if url.scheme == "https" else 80)
    # An IPv6 literal's zone ("fe80::1%25eth0") is not part of its address.
    literal = host.strip("[]").split("%", 1)[0]
    try:
        addresses: list[IPAddress] = [ipaddress.ip_address(literal)]
    except ValueError:
        addresses = await _resolve_host(host, port)
    for ip in addresses:
        reason = address_refusal(ip, allow_private=allow_private, allowed_networks=allowed_networks)
        if reason is not None:
            where = f"the address {ip}" if ip == _literal_address(literal) else f"{host} resolves to {ip}, which"
            raise UrlRefused(
                f"Refused to fetch {url}: {where} is {reason}. "
                "Private addresses are only fetched when the operator allows them."
            )
    if resolver is not None:
        resolver.remember(host, addresses)
    return addresses


async def _read_capped(resp: aiohttp.ClientResponse, url: URL, max_bytes: int, *, cut: bool) -> tuple[bytes, bool]:
    """The body and whether it was cut; over max_bytes it is cut (when `cut`) or refused."""
    declared = resp.content_length
    if declared is not None and declared > max_bytes and not cut:
        raise UrlRefused(f"{url} is {declared} bytes, over the {max_bytes}-byte limit.")
    body = bytearray()
    async for chunk in resp.content.iter_chunked(READ_CHUNK_BYTES):
        body.extend(chunk)
        if len(body) > max_bytes:
            if cut:
                # Stop reading: the rest is never downloaded, and closing the response drops the connection.
                return bytes(body[:max_bytes]), True
            raise UrlRefused(f"{url} is larger than the {max_bytes}-byte limit.")
    return bytes(body), False


async def _fetch_hops(
    session: aiohttp.ClientSession,
    resolver: _VettedResolver,
    start: URL,
    *,
    allow_private: bool,
    allowed_networks: Sequence[IPNetwork],
    max_bytes: int,
    cut_text: bool,
    content_types: frozenset[str] = ALLOWED_CONTENT_TYPES,
) -> FetchedResource:
    url = start
    for _hop in range(MAX_REDIRECTS + 1):
        await vet_url(url, allow_private=allow_private, allowed_networks=allowed_networks, resolver=resolver)
        async with session.get(url, allow_redirects=False) as resp:
            if resp.status in (301, 302, 303, 307, 308):
                location = resp.headers.get("Location")
                if not location:
                    raise FetchError(f"{url} answered a redirect without a Location header.")
                try:
                    url = url.join(URL(location))
                except (ValueError, TypeError):
                    raise UrlRefused(f"{url} redirected to {location[:200]!r}, which is not a valid URL.") from None
                continue
            if resp.status >= 400:
                raise FetchError(
                    f"{url} answered HTTP {resp.status} {resp.reason or ''}".rstrip() + ".", status=resp.status
                )
            if resp.status != 200:
                raise FetchError(f"{url} answered HTTP {resp.status}, which is not a document.")
            content_type = resp.content_type.lower()
            if content_type not in content_types:
                raise UrlRefused(
                    f"{url} is {content_type or 'of unknown type'}; only HTML, plain text, Markdown, "
                    "reStructuredText, PDF, Word, PowerPoint and Excel files can be read."
                )
            cut = cut_text and content_type in TEXT_CONTENT_TYPES
            body, truncated = await _read_capped(resp, url, max_bytes, cut=cut)
            return FetchedResource(
                url=str(start),
                final_url=str(url),
                content_type=content_type,
                charset=resp.charset,
                body=body,
                truncated=truncated,
            )
    raise FetchError(f"{start} redirected more than {MAX_REDIRECTS} times; use the final URL instead.")


async def fetch_url(
    url: str,
    *,
    allow_private: bool = False,
    allowed_networks: Sequence[str] = (),
    max_bytes: int = 5_000_000,
    timeout_s: float = 20.0,
    cut_text: bool = False,
    content_types: frozenset[str] = ALLOWED_CONTENT_TYPES,
) -> FetchedResource:
    """Fetch url (following up to MAX_REDIRECTS redirects, each re-checked) within size and time caps.

    Over max_bytes the fetch is refused, unless `cut_text` and the body is text or HTML: then its
    first max_bytes are kept and `truncated` says so (a cut PDF or Office file cannot be read).
    content_types are the types read (others refused before the body is read); a crawl widens them for sitemaps.
    """
    try:
        start = URL(url.strip())
    except (ValueError, TypeError):
        raise UrlRefused(f"{url!r} is not a valid URL.") from None
    if not start.is_absolute():
        raise UrlRefused(f"{url!r} is not an absolute http(s) URL.")
    networks = parse_networks(allowed_networks)
    resolver = _VettedResolver()
    # No DNS cache: every connection asks the vetted resolver, never the system resolver.
    connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False)
    headers: dict[str, Any] = {"User-Agent": USER_AGENT, "Accept": ", ".join(sorted(ALLOWED_CONTENT_TYPES))}
    try:
        async with asyncio.timeout(timeout_s):
            async with aiohttp.ClientSession(connector=connector, headers=headers, trust_env=False) as session:
                return await _fetch_hops(
                    session,
                    resolver,
                    start,
                    allow_private=allow_private,
                    allowed_networks=networks,
                    max_bytes=max_bytes,
                    cut_text=cut_text,
                    content_types=content_types,
                )
    except TimeoutError:
        raise FetchError(f"{url} did not answer within {timeout_s:g} seconds.") from None
    except aiohttp.ClientError as exc:
        raise FetchError(f"{url} could not be fetched: {exc}.") from exc
    finally:
        await connector.close()
