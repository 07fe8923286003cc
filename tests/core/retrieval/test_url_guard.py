"""URL fetching refuses private addresses, bad redirects, oversize bodies and unknown content types."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from core.retrieval.loaders import LoadedDocument, load_url
from core.retrieval.url_guard import FetchError, UrlRefused, fetch_url
from tests.support.loopback_site import LoopbackSite

PAGE = "<html><head><title>Runbook</title></head><body><h1>Runbook</h1><p>Restart the relay.</p></body></html>"
BIG_BYTES = 300_000


class Site(LoopbackSite):
    """A local web server whose handlers record every path they serve."""

    async def handle(self, request: web.Request, name: str) -> web.StreamResponse:
        if name == "page.html":
            return web.Response(text=PAGE, content_type="text/html")
        if name == "notes.md":
            return web.Response(text="# Notes\n\nplain words", content_type="text/plain")
        if name == "image":
            return web.Response(body=b"\x89PNG....", content_type="image/png")
        if name == "big-declared":
            return web.Response(body=b"a" * BIG_BYTES, content_type="text/plain")
        if name == "big-streamed":
            response = web.StreamResponse(headers={"Content-Type": "text/plain"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            for _ in range(BIG_BYTES // 10_000):
                await response.write(b"b" * 10_000)
            await response.write_eof()
            return response
        if name == "to-page":
            raise web.HTTPFound("/page.html")
        if name == "to-metadata":
            raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")
        if name == "to-private":
            raise web.HTTPFound("http://10.0.0.1/admin")
        if name == "loop":
            raise web.HTTPFound("/loop")
        if name == "missing":
            raise web.HTTPNotFound()
        raise web.HTTPNotFound()


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    server = Site()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def no_connections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Fails any connection attempt and records it, to prove refusals happen before connecting."""
    attempts: list[Any] = []

    async def refuse(self: aiohttp.TCPConnector, req: Any, *args: Any, **kwargs: Any) -> Any:
        attempts.append(req.url)
        raise AssertionError(f"connection attempted to {req.url}")

    monkeypatch.setattr(aiohttp.TCPConnector, "connect", refuse)
    return attempts


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://172.16.5.4/",
        "http://192.168.1.1/",
        "http://[::1]/",
        "http://[fd00::1]/",
        "http://[fec0::1]/",
        "http://[fe80::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://0.0.0.0/",
        "http://localhost/",
        "http://2130706433/",
    ],
)
async def test_private_and_loopback_targets_are_refused_before_connecting(url: str, no_connections: list[Any]) -> None:
    with pytest.raises(UrlRefused) as refused:
        await fetch_url(url)
    assert "Refused" in str(refused.value)
    assert no_connections == []


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "gopher://x/", "/relative/path"])
async def test_only_absolute_http_urls_are_accepted(url: str, no_connections: list[Any]) -> None:
    with pytest.raises(UrlRefused):
        await fetch_url(url)
    assert no_connections == []


async def test_allow_private_fetches_a_local_page(site: Site) -> None:
    document = await load_url(f"{site.base}/page.html", allow_private=True)
    assert isinstance(document, LoadedDocument)
    assert document.title == "Runbook"
    assert document.uri == f"{site.base}/page.html"
    assert "# Runbook" in document.text and "Restart the relay." in document.text


async def test_markdown_served_as_plain_text_keeps_its_title(site: Site) -> None:
    document = await load_url(f"{site.base}/notes.md", allow_private=True)
    assert document.title == "Notes"


async def test_an_allowed_network_permits_that_network_only(site: Site) -> None:
    document = await load_url(f"{site.base}/to-page", allowed_networks=["127.0.0.1/32"])
    assert document.title == "Runbook"
    assert site.hits == ["to-page", "page.html"]
    with pytest.raises(UrlRefused):
        await fetch_url(f"http://[::1]:{site.port}/page.html", allowed_networks=["127.0.0.1/32"])


@pytest.mark.parametrize("path", ["to-metadata", "to-private"])
async def test_a_redirect_to_a_refused_address_is_refused(site: Site, path: str) -> None:
    with pytest.raises(UrlRefused) as refused:
        await fetch_url(f"{site.base}/{path}", allowed_networks=["127.0.0.1/32"])
    assert "169.254.169.254" in str(refused.value) or "10.0.0.1" in str(refused.value)
    assert site.hits == [path]


async def test_redirect_loops_stop(site: Site) -> None:
    with pytest.raises(FetchError) as failed:
        await fetch_url(f"{site.base}/loop", allow_private=True)
    assert "redirected more than" in str(failed.value)
    assert len(site.hits) == 6


async def test_the_connection_goes_to_the_vetted_address_without_resolving_again(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    lookups: list[str] = []

    async def fake_getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        lookups.append(host)
        if len(lookups) > 1:
            # A rebinding DNS server would answer differently the second time.
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", port))]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(loop, "getaddrinfo", fake_getaddrinfo)
    resource = await fetch_url(f"http://docs.test:{site.port}/page.html", allowed_networks=["127.0.0.1/32"])
    assert lookups == ["docs.test"]
    assert b"Restart the relay." in resource.body


async def test_a_hostname_with_any_bad_address_is_refused(
    monkeypatch: pytest.MonkeyPatch, no_connections: list[Any]
) -> None:
    loop = asyncio.get_running_loop()

    async def fake_getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", port)),
        ]

    monkeypatch.setattr(loop, "getaddrinfo", fake_getaddrinfo)
    with pytest.raises(UrlRefused) as refused:
        await fetch_url("https://mixed.test/doc")
    assert "10.1.2.3" in str(refused.value)
    assert no_connections == []


@pytest.mark.parametrize("path", ["big-declared", "big-streamed"])
async def test_bodies_over_the_size_cap_are_refused(site: Site, path: str) -> None:
    with pytest.raises(UrlRefused) as refused:
        await fetch_url(f"{site.base}/{path}", allow_private=True, max_bytes=BIG_BYTES // 3)
    assert "limit" in str(refused.value)


async def test_unsupported_content_types_are_refused(site: Site) -> None:
    with pytest.raises(UrlRefused) as refused:
        await fetch_url(f"{site.base}/image", allow_private=True)
    assert "image/png" in str(refused.value)


async def test_http_errors_are_reported(site: Site) -> None:
    with pytest.raises(FetchError) as failed:
        await fetch_url(f"{site.base}/missing", allow_private=True)
    assert "404" in str(failed.value)
