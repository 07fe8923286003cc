"""REST routes for application commands, interaction callbacks and interaction webhooks."""

from __future__ import annotations

import time
from collections.abc import Callable

from aiohttp import web

from tests.emulators.discord.core import API_PREFIX, EmulatorCore, error_response, is_ephemeral, json_response
from tests.emulators.discord.models import (
    EPHEMERAL_FLAG,
    LOADING_FLAG,
    Interaction,
    InteractionResponseKind,
    InteractionResponseRecord,
    JSONDict,
    StoredMessage,
)
from tests.emulators.discord.payloads import message_payload
from tests.emulators.discord.rest_channels import read_message_body, validation_error

INTERACTION_TOKEN_LIFETIME_S = 15 * 60
UNKNOWN_INTERACTION_CODE = 10062
ALREADY_ACKNOWLEDGED_CODE = 40060
UNKNOWN_WEBHOOK_CODE = 10015
INVALID_WEBHOOK_TOKEN_CODE = 50027
UNKNOWN_MESSAGE_CODE = 10008
CALLBACK_PONG = 1
CALLBACK_MESSAGE = 4
CALLBACK_DEFERRED_MESSAGE = 5
CALLBACK_DEFERRED_UPDATE = 6
CALLBACK_UPDATE_MESSAGE = 7
CALLBACK_MODAL = 9
COMMAND_INTERACTION = 2
COMPONENT_INTERACTION = 3
MODAL_SUBMIT_INTERACTION = 5
# Discord's modal limits: custom ids of 1 to 100 characters, a title of 1 to 45, 1 to 5 top-level components;
# a text input's label up to 45, placeholder up to 100, lengths and value up to 4,000.
MODAL_TITLE_MAX = 45
CUSTOM_ID_MAX = 100
MODAL_COMPONENTS_MAX = 5
TEXT_INPUT_LABEL_MAX = 45
TEXT_INPUT_PLACEHOLDER_MAX = 100
TEXT_INPUT_LENGTH_MAX = 4000
ACTION_ROW, TEXT_INPUT, LABEL = 1, 4, 18


def build_routes(core: EmulatorCore, base_url: Callable[[], str], *, ack_deadline_s: float) -> list[web.RouteDef]:
    world = core.world

    def record(
        interaction: Interaction,
        kind: InteractionResponseKind,
        payload: JSONDict,
        *,
        callback_type: int | None = None,
        message: StoredMessage | None = None,
    ) -> None:
        interaction.responses.append(
            InteractionResponseRecord(
                kind=kind,
                callback_type=callback_type,
                payload=payload,
                message_id=message.id if message is not None else None,
                ephemeral=message.ephemeral if message is not None else is_ephemeral(payload.get("data") or {}),
                at=time.monotonic(),
            )
        )

    # ---- application commands -----------------------------------------------------------------

    def commands_for(guild_id: int | None) -> list[JSONDict]:
        return world.global_commands if guild_id is None else world.guild_commands.setdefault(guild_id, [])

    async def put_commands(request: web.Request) -> web.Response:
        guild_id = int(request.match_info["guild_id"]) if "guild_id" in request.match_info else None
        stored: list[JSONDict] = []
        for command in await request.json():
            key = (guild_id, str(command["name"]))
            command_id = world.command_ids.setdefault(key, world.ids.next())
            entry = {
                "type": 1,
                "description": "",
                "options": [],
                "default_member_permissions": None,
                "dm_permission": True,
                "nsfw": False,
                **command,
                "id": str(command_id),
                "application_id": str(world.application_id),
                "version": str(world.ids.next()),
            }
            if guild_id is not None:
                entry["guild_id"] = str(guild_id)
            stored.append(entry)
        commands_for(guild_id)[:] = stored
        return json_response(stored)

    async def get_commands(request: web.Request) -> web.Response:
        guild_id = int(request.match_info["guild_id"]) if "guild_id" in request.match_info else None
        return json_response(commands_for(guild_id))

    # ---- interaction callback -----------------------------------------------------------------

    async def callback(request: web.Request) -> web.Response:
        interaction = world.interactions.get(int(request.match_info["interaction_id"]))
        if interaction is None or interaction.token != request.match_info["token"]:
            return error_response(404, UNKNOWN_INTERACTION_CODE, "Unknown interaction")
        if interaction.callback_type is not None:
            return error_response(400, ALREADY_ACKNOWLEDGED_CODE, "Interaction has already been acknowledged.")
        if time.monotonic() - interaction.created_at > ack_deadline_s:
            return error_response(404, UNKNOWN_INTERACTION_CODE, "Unknown interaction")
        body, attachments = await read_message_body(core, request, base_url())
        callback_type = int(body.get("type", 0))
        data: JSONDict = body.get("data") or {}
        message: StoredMessage | None = None
        if callback_type in (CALLBACK_MESSAGE, CALLBACK_UPDATE_MESSAGE):
            needs_content = callback_type == CALLBACK_MESSAGE
            if (error := validation_error(data, attachment_count=len(attachments), require_content=needs_content)) is not None:
                return error
        # A modal's submission may update the message of the button that opened it; nothing else but a click may.
        on_message = interaction.type == COMPONENT_INTERACTION or (
            interaction.type == MODAL_SUBMIT_INTERACTION and interaction.source_message_id is not None
        )
        if callback_type in (CALLBACK_DEFERRED_UPDATE, CALLBACK_UPDATE_MESSAGE) and not on_message:
            return error_response(400, 40004, "Interaction response type not valid for this interaction")
        if callback_type == CALLBACK_MODAL:
            # Only a command or a click can answer with a modal, and only as its first response.
            if interaction.type not in (COMMAND_INTERACTION, COMPONENT_INTERACTION):
                return error_response(400, 40004, "Interaction response type not valid for this interaction")
            if (problem := modal_problem(data)) is not None:
                return error_response(400, 50035, f"Invalid Form Body: {problem}")
            interaction.modal = data
        interaction.callback_type = callback_type
        if callback_type == CALLBACK_MESSAGE:
            message = await core.store_message(
                channel_id=interaction.channel_id,
                author_id=world.bot_user_id,
                body=data,
                attachments=attachments,
                webhook_id=world.application_id,
                interaction_id=interaction.id,
            )
        elif callback_type == CALLBACK_DEFERRED_MESSAGE:
            message = await core.store_message(
                channel_id=interaction.channel_id,
                author_id=world.bot_user_id,
                body={},
                webhook_id=world.application_id,
                interaction_id=interaction.id,
                flags=LOADING_FLAG | (int(data.get("flags") or 0) & EPHEMERAL_FLAG),
            )
            interaction.original_loading = True
        elif callback_type in (CALLBACK_DEFERRED_UPDATE, CALLBACK_UPDATE_MESSAGE):
            message = world.messages.get(interaction.source_message_id or 0)
            if message is not None and callback_type == CALLBACK_UPDATE_MESSAGE:
                await core.edit_message(message, data)
        if message is not None:
            interaction.original_message_id = message.id
        record(interaction, "callback", body, callback_type=callback_type, message=message)
        if request.query.get("with_response", "").lower() not in ("1", "true"):
            return web.Response(status=204)
        answer: JSONDict = {
            "interaction": {
                "id": str(interaction.id),
                "type": interaction.type,
                "response_message_loading": callback_type == CALLBACK_DEFERRED_MESSAGE,
                "response_message_ephemeral": bool(message and message.ephemeral),
            }
        }
        if message is not None:
            answer["interaction"]["response_message_id"] = str(message.id)
        resource: JSONDict = {"type": callback_type}
        if message is not None and callback_type != CALLBACK_DEFERRED_UPDATE:
            resource["message"] = message_payload(world, message)
        answer["resource"] = resource
        return json_response(answer)

    # ---- interaction webhooks -----------------------------------------------------------------

    def interaction_or_error(request: web.Request) -> Interaction | web.Response:
        interaction = world.interactions_by_token.get(request.match_info["token"])
        if interaction is None or request.match_info["application_id"] != str(world.application_id):
            return error_response(404, UNKNOWN_WEBHOOK_CODE, "Unknown Webhook")
        lifetime_s = core.token_lifetime_s if core.token_lifetime_s is not None else INTERACTION_TOKEN_LIFETIME_S * core.time_scale
        if time.monotonic() - interaction.created_at > lifetime_s:
            return error_response(401, INVALID_WEBHOOK_TOKEN_CODE, "Invalid Webhook Token")
        return interaction

    def target_message(interaction: Interaction, request: web.Request) -> StoredMessage | web.Response:
        raw_id = request.match_info.get("message_id")
        message_id = interaction.original_message_id if raw_id is None else int(raw_id)
        message = world.messages.get(message_id or 0)
        belongs = message is not None and (raw_id is None or message.interaction_id == interaction.id)
        if message is None or message.deleted or not belongs:
            return error_response(404, UNKNOWN_MESSAGE_CODE, "Unknown Message")
        return message

    async def get_webhook_message(request: web.Request) -> web.Response:
        interaction = interaction_or_error(request)
        if isinstance(interaction, web.Response):
            return interaction
        message = target_message(interaction, request)
        return message if isinstance(message, web.Response) else json_response(message_payload(world, message))

    async def edit_webhook_message(request: web.Request) -> web.Response:
        interaction = interaction_or_error(request)
        if isinstance(interaction, web.Response):
            return interaction
        message = target_message(interaction, request)
        if isinstance(message, web.Response):
            return message
        body, _ = await read_message_body(core, request, base_url())
        if (error := validation_error(body, require_content=False)) is not None:
            return error
        is_original = "message_id" not in request.match_info
        flags = None
        if is_original and interaction.original_loading:
            interaction.original_loading = False
            flags = message.flags & ~LOADING_FLAG
        await core.edit_message(message, body, flags=flags)
        record(interaction, "edit_original" if is_original else "edit_followup", body, message=message)
        return json_response(message_payload(world, message))

    async def delete_webhook_message(request: web.Request) -> web.Response:
        interaction = interaction_or_error(request)
        if isinstance(interaction, web.Response):
            return interaction
        message = target_message(interaction, request)
        if isinstance(message, web.Response):
            return message
        message.deleted = True
        is_original = "message_id" not in request.match_info
        record(interaction, "delete_original" if is_original else "delete_followup", {}, message=message)
        return web.Response(status=204)

    async def followup(request: web.Request) -> web.Response:
        interaction = interaction_or_error(request)
        if isinstance(interaction, web.Response):
            return interaction
        if interaction.callback_type is None:
            return error_response(404, UNKNOWN_WEBHOOK_CODE, "Unknown Webhook")
        body, attachments = await read_message_body(core, request, base_url())
        if (error := validation_error(body, attachment_count=len(attachments))) is not None:
            return error
        original = world.messages.get(interaction.original_message_id or 0)
        if interaction.original_loading and original is not None:
            # After a deferred response, the first followup fills in the "thinking…" message.
            interaction.original_loading = False
            if attachments:
                original.attachments = list(attachments)
            message = await core.edit_message(original, body, flags=original.flags & ~LOADING_FLAG)
        else:
            message = await core.store_message(
                channel_id=interaction.channel_id,
                author_id=world.bot_user_id,
                body=body,
                attachments=attachments,
                webhook_id=world.application_id,
                interaction_id=interaction.id,
                flags=int(body.get("flags") or 0) & EPHEMERAL_FLAG,
            )
        record(interaction, "followup", body, message=message)
        if request.query.get("wait", "").lower() in ("1", "true"):
            return json_response(message_payload(world, message))
        return web.Response(status=204)

    api = API_PREFIX
    hook = f"{api}/webhooks/{{application_id:\\d+}}/{{token}}"
    return [
        web.put(f"{api}/applications/{{application_id:\\d+}}/commands", put_commands, name="commands_put"),
        web.get(f"{api}/applications/{{application_id:\\d+}}/commands", get_commands, name="commands_get"),
        web.put(
            f"{api}/applications/{{application_id:\\d+}}/guilds/{{guild_id:\\d+}}/commands",
            put_commands,
            name="guild_commands_put",
        ),
        web.get(
            f"{api}/applications/{{application_id:\\d+}}/guilds/{{guild_id:\\d+}}/commands",
            get_commands,
            name="guild_commands_get",
        ),
        web.post(f"{api}/interactions/{{interaction_id:\\d+}}/{{token}}/callback", callback, name="interaction_callback"),
        web.post(hook, followup, name="webhook_create"),
        web.get(f"{hook}/messages/@original", get_webhook_message, name="webhook_get_original"),
        web.patch(f"{hook}/messages/@original", edit_webhook_message, name="webhook_edit"),
        web.delete(f"{hook}/messages/@original", delete_webhook_message, name="webhook_delete_original"),
        web.get(f"{hook}/messages/{{message_id:\\d+}}", get_webhook_message, name="webhook_get"),
        web.patch(f"{hook}/messages/{{message_id:\\d+}}", edit_webhook_message, name="webhook_edit_followup"),
        web.delete(f"{hook}/messages/{{message_id:\\d+}}", delete_webhook_message, name="webhook_delete"),
    ]


def modal_problem(data: JSONDict) -> str | None:
    """What Discord would refuse in a MODAL response's data; None when it is accepted."""
    custom_id, title = data.get("custom_id"), data.get("title")
    if not isinstance(custom_id, str) or not 0 < len(custom_id) <= CUSTOM_ID_MAX:
        return "data.custom_id must be 1 to 100 characters"
    if not isinstance(title, str) or not 0 < len(title) <= MODAL_TITLE_MAX:
        return "data.title must be 1 to 45 characters"
    components = data.get("components")
    if not isinstance(components, list) or not 0 < len(components) <= MODAL_COMPONENTS_MAX:
        return "data.components must hold 1 to 5 components"
    for number, component in enumerate(components):
        where = f"data.components.{number}"
        if not isinstance(component, dict):
            return f"{where} is not a component"
        if component.get("type") == ACTION_ROW:
            inner = component.get("components")
            if not isinstance(inner, list) or len(inner) != 1:
                return f"{where}: an action row in a modal holds exactly one text input"
            problem = _text_input_problem(inner[0], f"{where}.components.0", label=True)
        elif component.get("type") == LABEL:
            label = component.get("label")
            if not isinstance(label, str) or not 0 < len(label) <= TEXT_INPUT_LABEL_MAX:
                return f"{where}.label must be 1 to 45 characters"
            problem = _text_input_problem(component.get("component"), f"{where}.component", label=False)
        else:
            return f"{where} must be an action row or a label"
        if problem:
            return problem
    return None


def _text_input_problem(item: object, where: str, *, label: bool) -> str | None:
    if not isinstance(item, dict) or item.get("type") != TEXT_INPUT:
        return f"{where} must be a text input"
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not 0 < len(custom_id) <= CUSTOM_ID_MAX:
        return f"{where}.custom_id must be 1 to 100 characters"
    if item.get("style") not in (1, 2):
        return f"{where}.style must be 1 (short) or 2 (paragraph)"
    if label and (not isinstance(item.get("label"), str) or not 0 < len(item["label"]) <= TEXT_INPUT_LABEL_MAX):
        return f"{where}.label must be 1 to 45 characters"
    if len(str(item.get("placeholder") or "")) > TEXT_INPUT_PLACEHOLDER_MAX:
        return f"{where}.placeholder must be at most 100 characters"
    for key in ("min_length", "max_length"):
        value = item.get(key)
        if value is not None and not (isinstance(value, int) and 0 <= value <= TEXT_INPUT_LENGTH_MAX):
            return f"{where}.{key} must be 0 to 4000"
    if len(str(item.get("value") or "")) > int(item.get("max_length") or TEXT_INPUT_LENGTH_MAX):
        return f"{where}.value is longer than max_length"
    return None


def text_inputs(modal: JSONDict) -> list[JSONDict]:
    """The text inputs of a modal, in order (inside action rows or labels)."""
    found: list[JSONDict] = []
    for component in modal.get("components") or []:
        if component.get("type") == ACTION_ROW:
            found.extend(component.get("components") or [])
        elif component.get("type") == LABEL:
            found.append(component["component"])
    return found
