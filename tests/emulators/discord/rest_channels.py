"""REST routes for the bot user, gateway discovery, channels, messages, threads, DMs and commands."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from aiohttp import web

from tests.emulators.discord.core import API_PREFIX, EmulatorCore, error_response, json_response
from tests.emulators.discord.limits import EMPTY_MESSAGE_CODE, invalid_form_body, is_empty_message, message_body_errors
from tests.emulators.discord.models import DM_CHANNEL_TYPE, PUBLIC_THREAD_TYPE, Channel, JSONDict, StoredMessage
from tests.emulators.discord.payloads import (blanked_for_bot, channel_payload, member_payload, message_payload,
                                               user_payload)

MAX_HISTORY_LIMIT = 100
UNKNOWN_CHANNEL_CODE = 10003
UNKNOWN_MESSAGE_CODE = 10008
CANNOT_EDIT_OTHERS_CODE = 50005
THREAD_ALREADY_CREATED_CODE = 160004
UNKNOWN_GUILD_CODE = 10004
UNKNOWN_MEMBER_CODE = 10007
MISSING_PERMISSIONS_CODE = 50013
MISSING_ACCESS_CODE = 50001
GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 19


async def read_message_body(core: EmulatorCore, request: web.Request, base_url: str) -> tuple[JSONDict, list[JSONDict]]:
    """The JSON body of a message request, plus attachments when it came as multipart."""
    if not request.content_type.startswith("multipart/"):
        return (await request.json() if request.can_read_body else {}), []
    body: JSONDict = {}
    attachments: list[JSONDict] = []
    reader = await request.multipart()
    async for part in reader:
        if part.name == "payload_json":
            body = json.loads(await part.text())  # type: ignore[union-attr]
        elif part.name and part.name.startswith("files["):
            data = await part.read()  # type: ignore[union-attr]
            attachments.append(
                store_attachment(core, part.filename or "file", bytes(data), part.headers.get("Content-Type", ""), base_url)
            )
    return body, attachments


def store_attachment(core: EmulatorCore, filename: str, data: bytes, content_type: str, base_url: str) -> JSONDict:
    attachment_id = core.world.ids.next()
    key = f"{attachment_id}/{filename}"
    core.world.attachments[key] = (data, content_type or "application/octet-stream")
    url = f"{base_url}/attachments/{key}"
    return {
        "id": str(attachment_id),
        "filename": filename,
        "size": len(data),
        "url": url,
        "proxy_url": url,
        "content_type": content_type,
    }


def validation_error(body: JSONDict, *, attachment_count: int = 0, require_content: bool = True) -> web.Response | None:
    errors = message_body_errors(body)
    if errors:
        return json_response(invalid_form_body(errors), status=400)
    if require_content and is_empty_message(body, attachment_count=attachment_count):
        return error_response(400, EMPTY_MESSAGE_CODE, "Cannot send an empty message")
    return None


def build_routes(core: EmulatorCore, base_url: Callable[[], str], gateway_url: Callable[[], str]) -> list[web.RouteDef]:
    world = core.world

    def channel_or_404(request: web.Request) -> Channel | web.Response:
        channel = world.channels.get(int(request.match_info["channel_id"]))
        if channel is not None and not world.bot_may_read(channel.id):
            return error_response(403, MISSING_ACCESS_CODE, "Missing Access")
        return channel if channel is not None else error_response(404, UNKNOWN_CHANNEL_CODE, "Unknown Channel")

    def message_or_404(request: web.Request) -> StoredMessage | web.Response:
        if not world.bot_may_read(int(request.match_info["channel_id"])):
            return error_response(403, MISSING_ACCESS_CODE, "Missing Access")
        message = core.message_in_channel(int(request.match_info["channel_id"]), int(request.match_info["message_id"]))
        return message if message is not None else error_response(404, UNKNOWN_MESSAGE_CODE, "Unknown Message")

    async def get_me(_: web.Request) -> web.Response:
        return json_response(user_payload(world, world.bot_user_id))

    async def get_user(request: web.Request) -> web.Response:
        user_id = int(request.match_info["user_id"])
        if user_id not in world.users:
            return error_response(404, 10013, "Unknown User")
        return json_response(user_payload(world, user_id))

    async def get_application(_: web.Request) -> web.Response:
        return json_response(
            {
                "id": str(world.application_id),
                "name": world.bot_name,
                "icon": None,
                "description": "",
                "summary": "",
                "type": None,
                "bot_public": True,
                "bot_require_code_grant": False,
                "verify_key": "0" * 64,
                # GATEWAY_MESSAGE_CONTENT_LIMITED: the intent is on in the Developer Portal (a bot in under 100 servers).
                "flags": GATEWAY_MESSAGE_CONTENT_LIMITED if world.message_content_portal else 0,
                "owner": user_payload(world, world.bot_user_id),
                "team": None,
                "bot": user_payload(world, world.bot_user_id),
                "rpc_origins": [],
                "interactions_endpoint_url": None,
                "redirect_uris": [],
            }
        )

    async def get_gateway(_: web.Request) -> web.Response:
        return json_response({"url": gateway_url()})

    async def get_gateway_bot(_: web.Request) -> web.Response:
        limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": world.max_concurrency}
        return json_response({"url": gateway_url(), "shards": 1, "session_start_limit": limit})

    async def get_channel(request: web.Request) -> web.Response:
        channel = channel_or_404(request)
        return channel if isinstance(channel, web.Response) else json_response(channel_payload(world, channel))

    # Message nonces seen, for enforce_nonce: (channel, nonce) → (message, when).
    nonces: dict[tuple[int, str], tuple[StoredMessage, float]] = {}

    async def create_message(request: web.Request) -> web.Response:
        channel = channel_or_404(request)
        if isinstance(channel, web.Response):
            return channel
        if not world.bot_may_send(channel.id):
            return error_response(403, MISSING_PERMISSIONS_CODE, "Missing Permissions")
        body, attachments = await read_message_body(core, request, base_url())
        if (error := validation_error(body, attachment_count=len(attachments))) is not None:
            return error
        nonce = str(body.get("nonce") or "")
        if nonce and body.get("enforce_nonce"):
            # Discord: the same nonce from the same author within a few minutes returns the first message.
            earlier = nonces.get((channel.id, nonce))
            if earlier is not None and time.monotonic() - earlier[1] <= core.nonce_window_s:
                return json_response(message_payload(world, earlier[0]))
        message = await core.store_message(
            channel_id=channel.id, author_id=world.bot_user_id, body=body, attachments=attachments
        )
        if nonce:
            nonces[(channel.id, nonce)] = (message, time.monotonic())
        return json_response(message_payload(world, message))

    async def edit_message(request: web.Request) -> web.Response:
        message = message_or_404(request)
        if isinstance(message, web.Response):
            return message
        if message.author_id != world.bot_user_id:
            return error_response(403, CANNOT_EDIT_OTHERS_CODE, "Cannot edit a message authored by another user")
        body, _ = await read_message_body(core, request, base_url())
        if (error := validation_error(body, require_content=False)) is not None:
            return error
        await core.edit_message(message, body)
        return json_response(message_payload(world, message))

    def as_read(message: StoredMessage) -> JSONDict:
        return blanked_for_bot(world, message, message_payload(world, message), intent=world.message_content_portal)

    async def get_message(request: web.Request) -> web.Response:
        message = message_or_404(request)
        return message if isinstance(message, web.Response) else json_response(as_read(message))

    async def delete_message(request: web.Request) -> web.Response:
        message = message_or_404(request)
        if isinstance(message, web.Response):
            return message
        message.deleted = True
        payload: JSONDict = {"id": str(message.id), "channel_id": str(message.channel_id)}
        if message.guild_id is not None:
            payload["guild_id"] = str(message.guild_id)
        await core.hub.dispatch("MESSAGE_DELETE", lambda _session: payload)
        return web.Response(status=204)

    async def list_messages(request: web.Request) -> web.Response:
        channel = channel_or_404(request)
        if isinstance(channel, web.Response):
            return channel
        limit = int(request.query.get("limit", "50"))
        if not 1 <= limit <= MAX_HISTORY_LIMIT:
            errors = {"limit": {"_errors": [{"code": "NUMBER_TYPE_MAX", "message": "int value should be less than or equal to 100."}]}}
            return json_response(invalid_form_body(errors), status=400)
        if not world.bot_may_read_history(channel.id):
            return json_response([])  # Discord: without Read Message History, no messages
        newest_first = sorted(world.channel_messages(channel.id), key=lambda m: m.id, reverse=True)
        visible = [m for m in newest_first if not m.ephemeral]
        if "around" in request.query:
            # Half the limit up to and including the message, the rest after it, newest first.
            around = int(request.query["around"])
            older = [m for m in visible if m.id <= around][: (limit + 1) // 2]
            newer = [m for m in visible if m.id > around][-(limit - len(older)) :] if limit > len(older) else []
            visible = newer + older
        if "before" in request.query:
            visible = [m for m in visible if m.id < int(request.query["before"])]
        if "after" in request.query:
            visible = [m for m in visible if m.id > int(request.query["after"])][-limit:]
        return json_response([as_read(m) for m in visible[:limit]])

    async def create_thread_from_message(request: web.Request) -> web.Response:
        message = message_or_404(request)
        if isinstance(message, web.Response):
            return message
        if message.id in world.channels:
            return error_response(400, THREAD_ALREADY_CREATED_CODE, "A thread has already been created for this message")
        parent = world.channels.get(message.channel_id)
        if parent is None or not parent.threads_allowed:
            return error_response(403, MISSING_PERMISSIONS_CODE, "Missing Permissions")
        body = await request.json()
        name = str(body.get("name") or "")
        if not 1 <= len(name) <= 100:
            errors = {"name": {"_errors": [{"code": "BASE_TYPE_BAD_LENGTH", "message": "Must be between 1 and 100 in length."}]}}
            return json_response(invalid_form_body(errors), status=400)
        payload = await open_thread(core, message, name, owner_id=world.bot_user_id)
        return json_response(payload, status=201)

    async def add_reaction(request: web.Request) -> web.Response:
        message = message_or_404(request)
        if isinstance(message, web.Response):
            return message
        users = message.reactions.setdefault(request.match_info["emoji"], [])
        if world.bot_user_id not in users:
            users.append(world.bot_user_id)
        return web.Response(status=204)

    async def trigger_typing(request: web.Request) -> web.Response:
        channel = channel_or_404(request)
        if isinstance(channel, web.Response):
            return channel
        world.typing_channel_ids.append(channel.id)
        return web.Response(status=204)

    async def create_dm(request: web.Request) -> web.Response:
        recipient_id = int((await request.json())["recipient_id"])
        if recipient_id not in world.users:
            return error_response(400, 50033, "Invalid Recipients")
        return json_response(channel_payload(world, ensure_dm_channel(core, recipient_id)))

    async def get_member(request: web.Request) -> web.Response:
        guild_id, user_id = int(request.match_info["guild_id"]), int(request.match_info["user_id"])
        if guild_id not in world.guilds:
            return error_response(404, UNKNOWN_GUILD_CODE, "Unknown Guild")
        if not world.is_member(guild_id, user_id):
            return error_response(404, UNKNOWN_MEMBER_CODE, "Unknown Member")
        return json_response(member_payload(world, guild_id, user_id))

    async def get_attachment(request: web.Request) -> web.Response:
        stored = world.attachments.get(f"{request.match_info['attachment_id']}/{request.match_info['filename']}")
        if stored is None:
            return web.Response(status=404)
        data, content_type = stored
        return web.Response(body=data, headers={"Content-Type": content_type})

    api = API_PREFIX
    return [
        web.get(f"{api}/users/@me", get_me, name="get_me"),
        web.get(f"{api}/users/{{user_id:\\d+}}", get_user, name="get_user"),
        web.get(f"{api}/oauth2/applications/@me", get_application, name="get_application"),
        web.get(f"{api}/applications/@me", get_application, name="get_application_v2"),
        web.get(f"{api}/gateway", get_gateway, name="get_gateway"),
        web.get(f"{api}/gateway/bot", get_gateway_bot, name="get_gateway_bot"),
        web.get(f"{api}/channels/{{channel_id:\\d+}}", get_channel, name="get_channel"),
        web.post(f"{api}/channels/{{channel_id:\\d+}}/messages", create_message, name="message_create"),
        web.get(f"{api}/channels/{{channel_id:\\d+}}/messages", list_messages, name="message_list"),
        web.get(f"{api}/channels/{{channel_id:\\d+}}/messages/{{message_id:\\d+}}", get_message, name="message_get"),
        web.patch(f"{api}/channels/{{channel_id:\\d+}}/messages/{{message_id:\\d+}}", edit_message, name="message_edit"),
        web.delete(
            f"{api}/channels/{{channel_id:\\d+}}/messages/{{message_id:\\d+}}", delete_message, name="message_delete"
        ),
        web.post(
            f"{api}/channels/{{channel_id:\\d+}}/messages/{{message_id:\\d+}}/threads",
            create_thread_from_message,
            name="thread_from_message",
        ),
        web.put(f"{api}/channels/{{channel_id:\\d+}}/messages/{{message_id:\\d+}}/reactions/{{emoji}}/@me", add_reaction,
                name="reaction_add"),
        web.post(f"{api}/channels/{{channel_id:\\d+}}/typing", trigger_typing, name="typing"),
        web.post(f"{api}/users/@me/channels", create_dm, name="dm_create"),
        web.get(f"{api}/guilds/{{guild_id:\\d+}}/members/{{user_id:\\d+}}", get_member, name="member_get"),
        web.get("/attachments/{attachment_id:\\d+}/{filename}", get_attachment, name="attachment"),
    ]


async def open_thread(core: EmulatorCore, message: StoredMessage, name: str, *, owner_id: int) -> JSONDict:
    """A public thread started on a message, announced by THREAD_CREATE; returns its payload. The bot is a
    member (the payload's `member`) only of a thread it opened itself."""
    world = core.world
    # Discord gives a thread started from a message the id of that message.
    thread = Channel(
        id=message.id,
        type=PUBLIC_THREAD_TYPE,
        name=name,
        guild_id=message.guild_id,
        parent_id=message.channel_id,
        owner_id=owner_id,
    )
    world.channels[thread.id] = thread
    payload = channel_payload(world, thread)
    if owner_id == world.bot_user_id:
        payload["member"] = {
            "id": str(thread.id),
            "user_id": str(world.bot_user_id),
            "join_timestamp": payload["thread_metadata"]["create_timestamp"],
            "flags": 1,
        }
    await core.hub.dispatch("THREAD_CREATE", lambda _session: {**payload, "newly_created": True})
    return payload


def ensure_dm_channel(core: EmulatorCore, user_id: int) -> Channel:
    world = core.world
    channel_id = world.dm_channel_by_user.get(user_id)
    if channel_id is None:
        channel_id = world.ids.next()
        world.channels[channel_id] = Channel(id=channel_id, type=DM_CHANNEL_TYPE, name="", recipient_id=user_id)
        world.dm_channel_by_user[user_id] = channel_id
    return world.channels[channel_id]
