"""Discord's install link and doctor line: the scopes and the permissions the bot needs (each flag with why), and
`relaybot doctor`'s check of the token that prints the link."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp
import discord

from core.config import Settings
from core.redact import redact_url

from .settings import DiscordSettings

DEFAULT_API_BASE = "https://discord.com/api/v10"
DOCTOR_TIMEOUT_S = 10.0
# `bot` adds the bot user to the server; `applications.commands` lets it register /ask, /relaybot and the message commands.
INSTALL_SCOPES = ("bot", "applications.commands")


@dataclass(frozen=True, kw_only=True)
class Need:
    """One permission the bot asks for at install, by discord.Permissions' flag name, and what it is for."""

    flag: str
    why: str


NEEDS: tuple[Need, ...] = (
    Need(flag="view_channel", why="see the channels it is asked in, and its threads there"),
    Need(flag="send_messages", why="post answers, approvals, sources, reminders and the welcome line"),
    Need(flag="send_messages_in_threads", why="answer in the thread it opens on a question, and follow-ups there"),
    Need(flag="create_public_threads", why="open a thread on a question asked in a channel"),
    Need(flag="read_message_history", why="read a thread's earlier messages as context and for read_conversation, "
                                          "and find a post whose reply was lost before sending it again"),
    Need(flag="embed_links", why="show an answer's sources as an embed"),
    Need(flag="attach_files", why="send an approval's full arguments as a file"),
    Need(flag="add_reactions", why="mark with ✋ the messages past a respond_to=all channel's cap"),
)


def needed_permissions() -> discord.Permissions:
    """Every permission of NEEDS, and nothing else."""
    return discord.Permissions(**{need.flag: True for need in NEEDS})


def missing_permissions(granted: discord.Permissions) -> list[str]:
    """The flags of NEEDS that `granted` lacks, in NEEDS' order."""
    return [need.flag for need in NEEDS if not getattr(granted, need.flag)]


def install_link(application_id: int | str) -> str:
    """The URL that adds the bot to a server with the permissions it needs (the person installing picks the server)."""
    return discord.utils.oauth_url(application_id, permissions=needed_permissions(), scopes=INSTALL_SCOPES)


async def check_discord(settings: Settings) -> str:
    """One line for `relaybot doctor`: does Discord accept the bot token, and the link that installs the bot."""
    group = settings.platform_settings(DiscordSettings)
    if not group.token:
        return "not configured (DISCORD_TOKEN is not set)"
    base = (group.api_base or DEFAULT_API_BASE).rstrip("/")
    headers = {"Authorization": f"Bot {group.token}"}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DOCTOR_TIMEOUT_S)) as http:
            async with http.get(f"{base}/users/@me", headers=headers) as response:
                if response.status == 401:
                    return "FAILED — the bot token was rejected (401); copy it again from the Bot page"
                if response.status != 200:
                    return f"FAILED — {redact_url(base)}/users/@me answered HTTP {response.status}"
                me = await response.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
        # ValueError: aiohttp refuses a base URL with credentials next to an Authorization header.
        return f"FAILED — cannot reach {redact_url(base)} ({exc.__class__.__name__})"
    bot_id = me.get("id", "?")
    # A bot user's id is its application's id, the client_id the install link needs.
    return f"ok — logged in as {me.get('username', '?')} (id {bot_id}); install it in a server: {install_link(bot_id)}"
