"""The Discord emulator's slash data for subcommand groups: options nested under the group and subcommand, and
only declared choices accepted, as Discord's client sends them."""

from __future__ import annotations

import pytest

from tests.emulators.discord.interaction_payloads import slash_data

COMMAND = {
    "id": "1", "name": "relaybot",
    "options": [{"type": 2, "name": "config", "options": [
        {"type": 1, "name": "show", "options": []},
        {"type": 1, "name": "set", "options": [
            {"type": 3, "name": "field", "required": True, "choices": [{"name": "model", "value": "model"}]},
            {"type": 3, "name": "value", "required": True},
        ]},
    ]}],
}


def test_subcommand_options_are_nested() -> None:
    data = slash_data(COMMAND, {"field": "model", "value": "gpt-4o"}, ["config", "set"])
    [group] = data["options"]
    assert (group["name"], group["type"]) == ("config", 2)
    [sub] = group["options"]
    assert (sub["name"], sub["type"]) == ("set", 1)
    assert sub["options"] == [{"name": "field", "type": 3, "value": "model"}, {"name": "value", "type": 3, "value": "gpt-4o"}]
    assert slash_data(COMMAND, {}, ["config", "show"])["options"][0]["options"][0]["options"] == []


def test_what_discord_would_not_send_is_refused() -> None:
    with pytest.raises(ValueError, match="choice"):
        slash_data(COMMAND, {"field": "colour", "value": "red"}, ["config", "set"])
    with pytest.raises(ValueError, match="required"):
        slash_data(COMMAND, {"field": "model"}, ["config", "set"])
    with pytest.raises(ValueError, match="group"):
        slash_data(COMMAND, {}, ["config"])
    with pytest.raises(ValueError, match="no subcommand"):
        slash_data(COMMAND, {}, ["config", "delete"])
