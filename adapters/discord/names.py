"""Discord's half of the CLI's names (core/names.py): a guild's channels and members, read through transport_directory.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiohttp
import discord

from adapters.streaming import CONNECTION_ERRORS, RateLimited, TransientSendError
from adapters.streaming.transport import PermanentSendError
from core.config import Settings
from core.names import Kind, Named, NamesUnreadable

from .settings import DiscordSettings
from .transport_directory import MEMBERS_PAGE, DirectoryDoor, cli_pacing

# Pages of members read at most per guild (a million members): a bound, not a size anyone reaches.
MAX_MEMBER_PAGES = 1000
# Channel types that are not places to talk in: categories.
CATEGORY_TYPE = 4
MISSING_ACCESS = 50001


class DiscordNames:
    """Implements core.names.NameDirectory: channels per guild (its scope's GUILD), members per guild, and with
    workspace "" the members of every guild the bot serves (DISCORD_GUILD_IDS, else every guild it is in)."""

    def __init__(self, door: DirectoryDoor, *, guild_ids: Sequence[str] = (), dm_workspace: str = "") -> None:
        self._door = door
        self._guild_ids = tuple(guild_ids)
        self._dm_workspace = dm_workspace
        self._opened = False

    async def list(self, kind: Kind, workspace: str) -> Sequence[Named]:
        if workspace and workspace == self._dm_workspace:
            return []  # DMs have no names to look up
        try:
            if not self._opened:
                await self._door.open()
                self._opened = True
            if kind == "channel":
                return await self._channels(int(workspace))
            guilds = [int(workspace)] if workspace else await self._served_guilds()
            people: dict[str, Named] = {}
            for guild_id in guilds:
                people.update((person.id, person) for person in await self._members(guild_id))
            return list(people.values())
        except ValueError:
            raise NamesUnreadable(f"{workspace!r} is not a guild id", list_only=True) from None
        except discord.LoginFailure:
            raise NamesUnreadable("Discord refused the bot token") from None
        except discord.Forbidden as error:
            if error.code == MISSING_ACCESS and kind == "user":
                raise NamesUnreadable("listing members needs the Server Members intent on the Bot page") from None
            raise NamesUnreadable(f"Discord refused the list (403, code {error.code})", list_only=True) from None
        except discord.NotFound:
            raise NamesUnreadable(f"the bot is not in guild {workspace}", list_only=True) from None
        except (PermanentSendError, RateLimited, TransientSendError, discord.HTTPException, aiohttp.ClientError,
                *CONNECTION_ERRORS) as error:
            raise NamesUnreadable(f"Discord could not be read: {error}") from None

    async def close(self) -> None:
        await self._door.close()

    async def _channels(self, guild_id: int) -> list[Named]:
        return [Named(id=str(c["id"]), name=str(c.get("name") or ""))
                for c in await self._door.channels(guild_id) if c.get("type") != CATEGORY_TYPE and c.get("name")]

    async def _members(self, guild_id: int) -> list[Named]:
        found: list[Named] = []
        after = 0
        for _ in range(MAX_MEMBER_PAGES):
            page = await self._door.members(guild_id, after=after)
            found.extend(_person(member) for member in page if isinstance(member.get("user"), dict))
            if len(page) < MEMBERS_PAGE:
                break
            after = max(int(member["user"]["id"]) for member in page)
        return found

    async def _served_guilds(self) -> list[int]:
        if self._guild_ids:
            return [int(guild) for guild in self._guild_ids]
        return [int(guild["id"]) for guild in await self._door.guilds()]


def _person(member: dict[str, Any]) -> Named:
    """A member as shown where they talk: their server nickname, else their display name, else their username."""
    user = member["user"]
    names = [str(n) for n in (member.get("nick"), user.get("global_name"), user.get("username")) if n]
    return Named(id=str(user["id"]), name=names[0] if names else str(user["id"]), also=tuple(dict.fromkeys(names[1:])))


def discord_names(settings: Settings, *, dm_workspace: str) -> DiscordNames | None:
    """The directory over Discord's REST door, or None where DISCORD_TOKEN is not set."""
    group = settings.platform_settings(DiscordSettings)
    if not group.token:
        return None
    budget, clock = cli_pacing(group)
    return DiscordNames(DirectoryDoor(token=group.token, budget=budget, clock=clock),
                        guild_ids=group.guild_ids, dm_workspace=dm_workspace)
