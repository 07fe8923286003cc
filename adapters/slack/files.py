"""Files on a Slack message, read by the shared rules: the bot token of the message's team goes only to Slack's own
hosts (or SLACK_API_URL's)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from adapters.policy import FileOnMessage, read_capped, read_files
from adapters.streaming import TransientSendError
from adapters.streaming.transport import PermanentSendError
from core.requests import Attachment

logger = logging.getLogger(__name__)

SLACK_HOST_SUFFIX = ".slack.com"
DOWNLOAD_TIMEOUT_S = 20.0


class SlackFiles:
    """Downloads a message's files with one aiohttp session, open while the adapter runs."""

    def __init__(self, *, api_url: str, token: Callable[[str], Awaitable[str]]) -> None:
        self._trusted = {urlsplit(api_url).netloc.lower()}
        self._token = token  # a team's current bot token (TeamClients.token)
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self._session = aiohttp.ClientSession()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def read(self, files: list[dict[str, Any]], *, team_id: str) -> tuple[Attachment, ...]:
        """The files on a message of `team_id`, by the shared rules, with that team's token; a URL that merely claims
        to be a file gets no token."""
        if not files or self._session is None:
            return ()
        found = [
            FileOnMessage(
                filename=str(info.get("name") or "file"), content_type=str(info.get("mimetype") or ""),
                size=int(info.get("size") or 0), handle=info,
            )
            for info in files
        ]

        async def download(file: FileOnMessage, cap: int) -> bytes | None:
            url = str(file.handle.get("url_private_download") or file.handle.get("url_private") or "")
            if not _trusted(url, self._trusted):
                logger.warning("not sending the bot token to %s for Slack file %s", urlsplit(url).netloc or "an empty URL",
                               file.handle.get("id"))
                return None
            try:
                token = await self._token(team_id)
            except (PermanentSendError, TransientSendError) as exc:  # as a download that fails: the file is left out
                logger.warning("not reading Slack file %s: %s", file.handle.get("id"), exc)
                return None
            return await self._download(url, file, cap, token=token)

        return await read_files(found, download)

    async def _download(self, url: str, file: FileOnMessage, cap: int, *, token: str) -> bytes | None:
        assert self._session is not None
        try:
            async with self._session.get(
                url, headers={"Authorization": f"Bearer {token}"},
                timeout=aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT_S),
            ) as response:
                # Without a valid token Slack answers 200 with its HTML sign-in page instead of the file.
                if response.status != 200 or (response.content_type == "text/html" and "html" not in file.content_type):
                    logger.warning("could not download Slack file %s: %s %s", file.filename, response.status,
                                   response.content_type)
                    return None
                return await read_capped(response.content.read, cap)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            logger.warning("could not download Slack file %s: %r", file.filename, exc)
            return None


def _trusted(url: str, trusted_hosts: set[str]) -> bool:
    parts = urlsplit(url)
    host = parts.netloc.lower()
    return host in trusted_hosts or (parts.scheme == "https" and (host == "slack.com" or host.endswith(SLACK_HOST_SUFFIX)))
