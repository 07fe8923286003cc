"""Closing a Socket Mode connection at once: the close frame gets a moment, then the session goes, whatever Slack does."""

from __future__ import annotations

import asyncio
import logging

from slack_sdk.socket_mode.aiohttp import SocketModeClient

logger = logging.getLogger(__name__)

# How long close() lets the Socket Mode close frame take; slack_sdk's own close waits for Slack's
# answer to it (up to aiohttp's 10 s), which is what made a SIGTERM take ~10 s.
SOCKET_CLOSE_WAIT_S = 0.5


async def close_socket(client: SocketModeClient) -> None:
    """Closes a Socket Mode connection without waiting for Slack to answer the close.

    slack_sdk's close() awaits the websocket's close handshake while its receive loop still reads
    the socket, so it waits for aiohttp's close timeout (10 s) before "session abandoned". Here the
    client's tasks stop first, the close frame gets SOCKET_CLOSE_WAIT_S, and the HTTP session is
    closed, which closes the socket whatever the server does."""
    client.closed = True
    client.auto_reconnect_enabled = False
    tasks = [task for task in (client.message_processor, client.current_session_monitor, client.message_receiver)
             if task is not None and not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=SOCKET_CLOSE_WAIT_S)
    session = client.current_session
    if session is not None and not session.closed:
        try:
            await asyncio.wait_for(session.close(), SOCKET_CLOSE_WAIT_S)
        except Exception:  # a timeout or a broken socket: the session's close below ends it either way
            logger.debug("Socket Mode close frame not acknowledged", exc_info=True)
    await client.aiohttp_client_session.close()
