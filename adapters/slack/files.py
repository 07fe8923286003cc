"""Downloads the text-like files on a Slack message with the bot token, for the engine."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from core.attachments import TEXT_ATTACHMENT_MAX_BYTES, is_text_like
from core.requests import Attachment

logger = logging.getLogger(__name__)

MAX_FILES_PER_MESSAGE = 5
SLACK_HOST_SUFFIX = ".slack.com"
DOWNLOAD_TIMEOUT_S = 20.0


async def download_attachments(
    session: aiohttp.ClientSession, files: list[dict[str, Any]], *, bot_token: str, api_url: str
) -> tuple[Attachment, ...]:
    """The readable files of a message; the others are skipped with a log line.

    The bot token goes only to Slack's own hosts (or the configured API host), never to a URL
    that merely claims to be a file.
    """
    trusted = {urlsplit(api_url).netloc.lower()}
    wanted = [info for info in files[:MAX_FILES_PER_MESSAGE] if _wanted(info) and _trusted(info, trusted)]
    results = await asyncio.gather(*(_download(session, info, bot_token=bot_token) for info in wanted))
    return tuple(attachment for attachment in results if attachment is not None)


def _trusted(info: dict[str, Any], trusted_hosts: set[str]) -> bool:
    parts = urlsplit(str(info.get("url_private_download") or info.get("url_private") or ""))
    host = parts.netloc.lower()
    if host in trusted_hosts or (parts.scheme == "https" and (host == "slack.com" or host.endswith(SLACK_HOST_SUFFIX))):
        return True
    logger.warning("not sending the bot token to %s for Slack file %s", host or "an empty URL", info.get("id"))
    return False


def _wanted(info: dict[str, Any]) -> bool:
    probe = Attachment(filename=str(info.get("name") or ""), content_type=str(info.get("mimetype") or ""), data=b"")
    if not is_text_like(probe):
        logger.info("skipping Slack file %s: not text-like (%s)", info.get("id"), info.get("mimetype"))
        return False
    if int(info.get("size") or 0) > TEXT_ATTACHMENT_MAX_BYTES:
        logger.info("skipping Slack file %s: %s bytes is too large", info.get("id"), info.get("size"))
        return False
    return bool(info.get("url_private_download") or info.get("url_private"))


async def _download(session: aiohttp.ClientSession, info: dict[str, Any], *, bot_token: str) -> Attachment | None:
    url = str(info.get("url_private_download") or info.get("url_private"))
    mimetype = str(info.get("mimetype") or "application/octet-stream")
    name = str(info.get("name") or "file")
    try:
        async with session.get(
            url, headers={"Authorization": f"Bearer {bot_token}"},
            timeout=aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT_S),
        ) as response:
            # Without a valid token Slack answers 200 with its HTML sign-in page instead of the file.
            if response.status != 200 or (response.content_type == "text/html" and "html" not in mimetype):
                logger.warning("could not download Slack file %s: %s %s", name, response.status, response.content_type)
                return None
            data = await response.content.read(TEXT_ATTACHMENT_MAX_BYTES + 1)
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        logger.warning("could not download Slack file %s: %r", name, exc)
        return None
    return Attachment(filename=name, content_type=mimetype, data=data)
