"""Discord's documented permission rule over REST JSON: a member's (or @everyone's) permissions in a channel, from the guild's roles, its owner and the channel's overwrites."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

JSON = dict[str, Any]
ADMINISTRATOR = 1 << 3
VIEW_CHANNEL = 1 << 10
READ_MESSAGE_HISTORY = 1 << 16
ALL = (1 << 53) - 1
ROLE_OVERWRITE = 0
MEMBER_OVERWRITE = 1


def base_permissions(guild: JSON, *, user_id: str | None, role_ids: Iterable[str]) -> int:
    """The guild-wide permissions: @everyone's and the member's roles' (None: @everyone alone); all for the owner
    or an administrator."""
    if user_id is not None and str(guild.get("owner_id")) == user_id:
        return ALL
    roles = {str(role["id"]): int(role.get("permissions") or 0) for role in guild.get("roles") or ()}
    allowed = roles.get(str(guild["id"]), 0)
    for role_id in role_ids:
        allowed |= roles.get(str(role_id), 0)
    return ALL if allowed & ADMINISTRATOR else allowed


def channel_permissions(
    guild: JSON, channel: JSON, *, user_id: str | None = None, role_ids: Iterable[str] = ()
) -> int:
    """The permissions in `channel` (a thread's caller passes its parent): the base, then @everyone's overwrite,
    then the roles' overwrites together, then the member's own (Discord's order)."""
    roles = [str(role_id) for role_id in role_ids]
    allowed = base_permissions(guild, user_id=user_id, role_ids=roles)
    if allowed == ALL:
        return ALL
    overwrites = {(int(o.get("type") or 0), str(o["id"])): o for o in channel.get("permission_overwrites") or ()}

    def apply(value: int, overwrite: JSON | None) -> int:
        if overwrite is None:
            return value
        return (value & ~int(overwrite.get("deny") or 0)) | int(overwrite.get("allow") or 0)

    allowed = apply(allowed, overwrites.get((ROLE_OVERWRITE, str(guild["id"]))))
    deny = allow = 0
    for role_id in roles:
        overwrite = overwrites.get((ROLE_OVERWRITE, role_id))
        if overwrite is not None:
            deny |= int(overwrite.get("deny") or 0)
            allow |= int(overwrite.get("allow") or 0)
    allowed = (allowed & ~deny) | allow
    if user_id is not None:
        allowed = apply(allowed, overwrites.get((MEMBER_OVERWRITE, user_id)))
    # Without View Channel nothing else in the channel counts (Discord's implicit denial).
    return allowed if allowed & VIEW_CHANNEL else 0


def may_read(permissions: int) -> bool:
    return bool(permissions & VIEW_CHANNEL) and bool(permissions & READ_MESSAGE_HISTORY)
