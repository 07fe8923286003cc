"""Whether the adapter takes an event: accepting (not shutting down) and an allowed guild."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import discord

from core.requests import Actor

log = logging.getLogger(__name__)

DM_WORKSPACE = "@dm"


class Gate:
    """Shared by message, command and click handlers."""

    def __init__(self, *, guild_ids: tuple[str, ...]) -> None:
        self._guild_ids = frozenset(guild_ids)
        self.accepting = True
        self.tasks: set[asyncio.Task[object]] = set()

    @contextmanager
    def track(self) -> Iterator[None]:
        """Remembers the running handler task, so close() can cancel what is left."""
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        try:
            yield
        finally:
            if task is not None:
                self.tasks.discard(task)

    def allows_guild(self, guild_id: int | None) -> bool:
        """DMs always pass; guilds pass when no allow-list is set or they are on it."""
        if guild_id is None or not self._guild_ids or str(guild_id) in self._guild_ids:
            return True
        log.info("ignoring an event from guild %s, which is not in DISCORD_GUILD_IDS", guild_id)
        return False


def workspace_of(guild_id: int | None) -> str:
    return DM_WORKSPACE if guild_id is None else str(guild_id)


def actor_of(user: discord.User | discord.Member, *, permissions: discord.Permissions | None = None) -> Actor:
    """An Actor from a Discord user: role ids as strings; Manage Server counts as admin."""
    roles = frozenset(str(role.id) for role in getattr(user, "roles", ()) if not role.is_default())
    is_admin = bool(permissions is not None and permissions.manage_guild)
    return Actor(id=str(user.id), name=user.display_name, roles=roles, is_admin=is_admin)
