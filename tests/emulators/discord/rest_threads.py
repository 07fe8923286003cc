"""REST routes for what learning reads besides messages: a guild (its roles and owner), its roles, its active threads, and a channel's archived public and private threads, paged by `before` with `has_more`."""

from __future__ import annotations

import datetime

from aiohttp import web

from tests.emulators.discord.core import API_PREFIX, EmulatorCore, error_response, json_response
from tests.emulators.discord.limits import invalid_form_body
from tests.emulators.discord.models import PRIVATE_THREAD_TYPE, PUBLIC_THREAD_TYPE, Channel
from tests.emulators.discord.payloads import channel_payload, guild_create_payload, iso, role_payload

UNKNOWN_GUILD_CODE = 10004
UNKNOWN_CHANNEL_CODE = 10003
MISSING_ACCESS_CODE = 50001
MISSING_PERMISSIONS_CODE = 50013
MANAGE_THREADS_PERMISSION = 1 << 34
READ_MESSAGE_HISTORY_PERMISSION = 1 << 16
ARCHIVED_DEFAULT_LIMIT = 50
ARCHIVED_MIN_LIMIT, ARCHIVED_MAX_LIMIT = 2, 100
GUILD_ONLY_FIELDS = ("members", "channels", "threads", "presences", "voice_states", "joined_at", "large",
                     "unavailable", "member_count", "lazy", "stage_instances", "guild_scheduled_events",
                     "soundboard_sounds")


def build_routes(core: EmulatorCore) -> list[web.RouteDef]:
    world = core.world

    def guild_or_error(request: web.Request) -> int | web.Response:
        guild_id = int(request.match_info["guild_id"])
        if guild_id not in world.guilds:
            return error_response(404, UNKNOWN_GUILD_CODE, "Unknown Guild")
        if guild_id in world.guilds_without_bot:
            return error_response(403, MISSING_ACCESS_CODE, "Missing Access")
        return guild_id

    async def get_guild(request: web.Request) -> web.Response:
        guild_id = guild_or_error(request)
        if isinstance(guild_id, web.Response):
            return guild_id
        payload = guild_create_payload(world, guild_id)
        return json_response({k: v for k, v in payload.items() if k not in GUILD_ONLY_FIELDS})

    async def get_roles(request: web.Request) -> web.Response:
        guild_id = guild_or_error(request)
        if isinstance(guild_id, web.Response):
            return guild_id
        return json_response([role_payload(world, role_id) for role_id in world.guilds[guild_id].role_ids])

    async def active_threads(request: web.Request) -> web.Response:
        """Every active thread of the guild the bot can see (v10: no has_more, the bot's thread members left out)."""
        guild_id = guild_or_error(request)
        if isinstance(guild_id, web.Response):
            return guild_id
        threads = [t for t in world.guild_threads(guild_id) if world.bot_may_read(t.id)]
        return json_response({"threads": [channel_payload(world, t) for t in threads], "members": []})

    def archived(kind: int) -> web.RouteDef:
        async def handler(request: web.Request) -> web.Response:
            channel = world.channels.get(int(request.match_info["channel_id"]))
            if channel is None:
                return error_response(404, UNKNOWN_CHANNEL_CODE, "Unknown Channel")
            if not world.bot_may_read(channel.id):
                return error_response(403, MISSING_ACCESS_CODE, "Missing Access")
            assert channel.guild_id is not None
            mine = world.channel_permissions(channel.guild_id, channel.id, world.bot_user_id)
            # Discord: Read Message History for either list, and Manage Threads for the private one.
            needed = READ_MESSAGE_HISTORY_PERMISSION | (MANAGE_THREADS_PERMISSION if kind == PRIVATE_THREAD_TYPE else 0)
            if mine & needed != needed:
                return error_response(403, MISSING_PERMISSIONS_CODE, "Missing Permissions")
            limit = int(request.query.get("limit", str(ARCHIVED_DEFAULT_LIMIT)))
            if not ARCHIVED_MIN_LIMIT <= limit <= ARCHIVED_MAX_LIMIT:
                errors = {"limit": {"_errors": [{"code": "NUMBER_TYPE_MAX", "message": "limit must be 2 to 100."}]}}
                return json_response(invalid_form_body(errors), status=400)
            page = _archived_page(world.channels.values(), channel.id, kind, request.query.get("before"))
            return json_response({"threads": [channel_payload(world, t) for t in page[:limit]], "members": [],
                                  "has_more": len(page) > limit})

        name = "public" if kind == PUBLIC_THREAD_TYPE else "private"
        return web.get(f"{API_PREFIX}/channels/{{channel_id:\\d+}}/threads/archived/{name}", handler,
                       name=f"threads_archived_{name}")

    api = API_PREFIX
    return [
        web.get(f"{api}/guilds/{{guild_id:\\d+}}", get_guild, name="guild_get"),
        web.get(f"{api}/guilds/{{guild_id:\\d+}}/roles", get_roles, name="guild_roles"),
        web.get(f"{api}/guilds/{{guild_id:\\d+}}/threads/active", active_threads, name="threads_active"),
        archived(PUBLIC_THREAD_TYPE),
        archived(PRIVATE_THREAD_TYPE),
    ]


def _archived_page(channels: object, parent_id: int, kind: int, before: str | None) -> list[Channel]:
    """The parent's archived threads of one kind, newest archived first, archived before `before` (ISO8601)."""
    found = [c for c in channels if isinstance(c, Channel) and c.parent_id == parent_id and c.type == kind and c.archived]
    if before:
        cut = datetime.datetime.fromisoformat(before.replace("Z", "+00:00"))
        # Compared as the payloads write the time (payloads.iso: whole microseconds, rounded by datetime), so the
        # page's last thread is not listed again: rounding the float here another way did so now and then.
        found = [c for c in found if datetime.datetime.fromisoformat(iso(c.archive_timestamp)) < cut]
    return sorted(found, key=lambda c: (c.archive_timestamp, c.id), reverse=True)
