"""REST routes that list a guild's channels and members, and the bot's guilds (what the CLI's names are read from),
and the bot leaving a guild."""

from __future__ import annotations

from aiohttp import web

from tests.emulators.discord.core import API_PREFIX, EmulatorCore, error_response, json_response
from tests.emulators.discord.models import PUBLIC_THREAD_TYPE
from tests.emulators.discord.payloads import channel_payload, member_payload

UNKNOWN_GUILD_CODE = 10004
INVALID_FORM_BODY_CODE = 50035
# GET /guilds/{id}/members: `limit` 1 to 1000, default 1; members in id order, after the `after` id.
MEMBERS_MAX_LIMIT = 1000


def build_routes(core: EmulatorCore) -> list[web.RouteDef]:
    world = core.world

    async def list_guild_channels(request: web.Request) -> web.Response:
        """The guild's channels (threads are not listed here, as on Discord)."""
        guild = world.guilds.get(int(request.match_info["guild_id"]))
        if guild is None:
            return error_response(404, UNKNOWN_GUILD_CODE, "Unknown Guild")
        channels = [world.channels[c] for c in guild.channel_ids if c in world.channels]
        return json_response([channel_payload(world, c) for c in channels if c.type != PUBLIC_THREAD_TYPE])

    async def list_guild_members(request: web.Request) -> web.Response:
        guild_id = int(request.match_info["guild_id"])
        if guild_id not in world.guilds:
            return error_response(404, UNKNOWN_GUILD_CODE, "Unknown Guild")
        try:
            limit = int(request.query.get("limit", "1"))
            after = int(request.query.get("after", "0"))
        except ValueError:
            return error_response(400, INVALID_FORM_BODY_CODE, "Invalid Form Body")
        if not 1 <= limit <= MEMBERS_MAX_LIMIT:
            return error_response(400, INVALID_FORM_BODY_CODE, "Invalid Form Body")
        members = sorted(u for u in world.guild_members(guild_id) if u > after)[:limit]
        return json_response([member_payload(world, guild_id, user_id) for user_id in members])

    async def list_my_guilds(request: web.Request) -> web.Response:
        return json_response([
            {"id": str(g.id), "name": g.name, "icon": None, "owner": g.owner_id == world.bot_user_id,
             "permissions": "0", "features": []}
            for g in (world.guilds[guild_id] for guild_id in world.bot_guild_ids())
        ])

    async def leave_guild(request: web.Request) -> web.Response:
        """DELETE /users/@me/guilds/{id}: 204, then GUILD_DELETE to the guild's shard; 404 where the bot is not in it."""
        guild_id = int(request.match_info["guild_id"])
        if guild_id not in world.bot_guild_ids():
            return error_response(404, UNKNOWN_GUILD_CODE, "Unknown Guild")
        world.guilds_without_bot.add(guild_id)
        await core.hub.guild_removed(guild_id)
        return web.Response(status=204)

    api = API_PREFIX
    return [
        web.get(f"{api}/guilds/{{guild_id:\\d+}}/channels", list_guild_channels, name="guild_channels_list"),
        web.get(f"{api}/guilds/{{guild_id:\\d+}}/members", list_guild_members, name="guild_members_list"),
        web.get(f"{api}/users/@me/guilds", list_my_guilds, name="my_guilds_list"),
        web.delete(f"{api}/users/@me/guilds/{{guild_id:\\d+}}", leave_guild, name="guild_leave"),
    ]
