"""Builds INTERACTION_CREATE payloads for button clicks and slash commands."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tests.emulators.discord.models import Interaction, JSONDict, StoredMessage
from tests.emulators.discord.payloads import channel_payload, member_payload, message_payload, user_payload
from tests.emulators.discord.state import (
    ALL_PERMISSIONS,
    READ_MESSAGE_HISTORY_PERMISSION,
    VIEW_CHANNEL_PERMISSION,
    World,
)

ATTACHMENT_SIZE_LIMIT_BYTES = 10 * 1024 * 1024
INTERACTION_VERSION = 1
CONTEXT_GUILD = 0
CONTEXT_BOT_DM = 1
OPTION_STRING, OPTION_INTEGER, OPTION_BOOLEAN, OPTION_NUMBER = 3, 4, 5, 10
SUB_COMMAND, SUB_COMMAND_GROUP = 1, 2
CHAT_INPUT_COMMAND, USER_COMMAND, MESSAGE_COMMAND = 1, 2, 3

OptionValue = str | int | float | bool


def interaction_payload(world: World, interaction: Interaction, data: JSONDict) -> JSONDict:
    channel = world.channels[interaction.channel_id]
    payload: JSONDict = {
        "id": str(interaction.id),
        "application_id": str(world.application_id),
        "type": interaction.type,
        "token": interaction.token,
        "version": INTERACTION_VERSION,
        "attachment_size_limit": ATTACHMENT_SIZE_LIMIT_BYTES,
        "data": data,
        "channel": channel_payload(world, channel),
        "channel_id": str(channel.id),
        "app_permissions": str(app_permissions(world, channel.id)),
        "locale": "en-US",
        "entitlements": [],
    }
    if interaction.guild_id is not None:
        member = member_payload(world, interaction.guild_id, interaction.user_id)
        member["permissions"] = str(world.channel_permissions(interaction.guild_id, channel.id, interaction.user_id))
        payload.update(
            guild_id=str(interaction.guild_id),
            guild={"id": str(interaction.guild_id), "locale": "en-US", "features": []},
            guild_locale="en-US",
            member=member,
            context=CONTEXT_GUILD,
            authorizing_integration_owners={"0": str(interaction.guild_id)},
        )
    else:
        payload.update(
            user=user_payload(world, interaction.user_id),
            context=CONTEXT_BOT_DM,
            authorizing_integration_owners={"1": str(interaction.user_id)},
        )
    if interaction.source_message_id is not None:
        payload["message"] = message_payload(world, world.messages[interaction.source_message_id])
    return payload


def app_permissions(world: World, channel_id: int) -> int:
    """The bot's permissions in a channel, as an interaction there tells them: all of them, less View Channel and
    Read Message History where the bot may not read (World.bot_hidden_channels)."""
    if world.bot_may_read(channel_id):
        return ALL_PERMISSIONS
    return ALL_PERMISSIONS & ~(VIEW_CHANNEL_PERMISSION | READ_MESSAGE_HISTORY_PERMISSION)


def message_command_data(world: World, command: JSONDict, target: StoredMessage) -> JSONDict:
    """A message context-menu command's `data`: the target message by id, and whole under `resolved.messages`
    (with its content even without the Message Content intent: Discord exempts an interaction's own messages)."""
    data: JSONDict = {
        "id": command["id"],
        "name": command["name"],
        "type": MESSAGE_COMMAND,
        "target_id": str(target.id),
        "resolved": {"messages": {str(target.id): message_payload(world, target)}},
    }
    if "guild_id" in command:
        data["guild_id"] = command["guild_id"]
    return data


def find_button(components: tuple[JSONDict, ...], custom_id: str) -> JSONDict | None:
    for row in components:
        for child in row.get("components") or []:
            if child.get("custom_id") == custom_id:
                return child
    return None


def find_command(
    world: World, name: str, guild_id: int | None, *, kind: int = CHAT_INPUT_COMMAND
) -> JSONDict | None:
    """A synced command by name and type (a slash command and a message command may share a name)."""
    candidates = (world.guild_commands.get(guild_id, []) if guild_id is not None else []) + world.global_commands
    return next(
        (command for command in candidates if command["name"] == name and int(command.get("type", 1)) == kind), None
    )


def slash_data(command: JSONDict, options: Mapping[str, OptionValue], path: Sequence[str] = ()) -> JSONDict:
    """`path`: the subcommand group and subcommand under the command (`config`, `set`), nested as Discord nests
    them; a value must be one of its option's declared choices, as Discord's client only offers those."""
    data: JSONDict = {
        "id": command["id"],
        "name": command["name"],
        "type": 1,
        "options": _nested(command, list(path), options),
    }
    if "guild_id" in command:
        data["guild_id"] = command["guild_id"]
    return data


def _nested(declared: JSONDict, path: list[str], options: Mapping[str, OptionValue]) -> list[JSONDict]:
    if path:
        child = next((o for o in declared.get("options") or [] if o["name"] == path[0]
                      and int(o.get("type", 0)) in (SUB_COMMAND, SUB_COMMAND_GROUP)), None)
        if child is None:
            raise ValueError(f"{declared['name']!r} has no subcommand {path[0]!r}")
        return [{"name": child["name"], "type": int(child["type"]), "options": _nested(child, path[1:], options)}]
    if any(int(o.get("type", 0)) in (SUB_COMMAND, SUB_COMMAND_GROUP) for o in declared.get("options") or []):
        raise ValueError(f"{declared['name']!r} is a group: name one of its subcommands")
    by_name = {option["name"]: option for option in declared.get("options") or []}
    for name, option in by_name.items():
        if option.get("required") and name not in options:
            raise ValueError(f"option {name!r} is required")
    for name, value in options.items():
        choices = (by_name.get(name) or {}).get("choices")
        if choices and value not in [choice["value"] for choice in choices]:
            raise ValueError(f"{value!r} is not a choice of option {name!r}")
    return [
        {"name": name, "type": int((by_name.get(name) or {}).get("type", _infer_option_type(value))), "value": value}
        for name, value in options.items()
    ]


def _infer_option_type(value: OptionValue) -> int:
    if isinstance(value, bool):
        return OPTION_BOOLEAN
    if isinstance(value, int):
        return OPTION_INTEGER
    if isinstance(value, float):
        return OPTION_NUMBER
    return OPTION_STRING
