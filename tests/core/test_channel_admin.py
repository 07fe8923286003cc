"""The chat admin surfaces' shared editor: values read as the CLI reads them, form changes, who may, the actor."""

from __future__ import annotations

import pytest

from core.channel_admin import AdminRule, actor_id, diff, parse_changes, parse_value
from core.channels import ChannelSettings, ChannelSettingsError
from core.requests import Actor


def test_values_are_read_from_text_as_the_cli_reads_them() -> None:
    assert parse_value("agent_type", " agentic ") == "agentic"
    assert parse_value("tools", "calculator, read_url,") == ["calculator", "read_url"]
    assert parse_value("followups_need_mention", "Yes") is True
    assert parse_value("followups_need_mention", "off") is False
    assert parse_value("tool_policy", '{"read_url": "always"}') == {"read_url": "always"}
    for name, text in (("agent_type", "wizard"), ("followups_need_mention", "maybe"), ("tool_policy", "{"),
                       ("colour", "red")):
        with pytest.raises(ChannelSettingsError):
            parse_value(name, text)
    assert parse_changes(["model=gpt-4o", "sources="]) == ({"model": "gpt-4o"}, ["sources"])
    with pytest.raises(ChannelSettingsError, match="deploy"):
        parse_changes(['tool_policy={"deploy": "sometimes"}'])


def test_a_form_changes_only_what_differs_from_the_channels_own_values() -> None:
    own = ChannelSettings(model="gpt-4o", tools=(), approvers=("U1",))
    to_set, to_clear = diff(own, {"model": "gpt-4o", "agent_type": "research", "approvers": None, "tools": None,
                                  "system_prompt": None})
    assert to_set == {"agent_type": "research"}
    # An empty list set on purpose (no tools) is left alone by an empty field; a cleared field falls back a level.
    assert to_clear == ["approvers"]


def test_who_may_change_settings() -> None:
    rule = AdminRule(users=frozenset({"U9"}), roles=frozenset({"42"}))
    assert rule.allows(Actor(id="U1", is_admin=True))
    assert rule.allows(Actor(id="U9"))
    assert rule.allows(Actor(id="7", roles=frozenset({"42", "1"})))
    assert not rule.allows(Actor(id="U2", roles=frozenset({"1"})))
    assert not AdminRule(users=frozenset({""})).allows(Actor(id=""))
    assert actor_id("slack", "T1", "U1") == "slack:T1:U1"
