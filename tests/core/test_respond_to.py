"""respond_to (issue 27): how it resolves over the levels and maps onto followups_need_mention and the platform
settings, what a change clears besides, what is refused where the bot cannot read every message."""

from __future__ import annotations

import pytest

import bot.platforms  # noqa: F401  (registers every platform's settings group, as the CLI and runtime do)
from core.channel_admin import parse_changes, parse_value
from core.channels import (
    ChannelSettings,
    ChannelSettingsError,
    cleared_with,
    resolve,
    respond_to_refusal,
    superseded,
)
from core.config import Settings
from core.requests import ConversationKey

SLACK = ConversationKey(platform="slack", workspace="T1", channel="CHELP", thread="1.0")
DISCORD = ConversationKey(platform="discord", workspace="G1", channel="C1")


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, llm_model="base-model", **values)


def test_the_settings_level_maps_thread_followups_and_the_intent_onto_respond_to() -> None:
    on = settings(slack_thread_followups=True, discord_message_content_intent=True)
    off = settings(slack_thread_followups=False, discord_message_content_intent=False)
    for key in (SLACK, DISCORD):
        assert resolve(key, channel=None, workspace=None, settings=on).respond_to == "threads"
        config = resolve(key, channel=None, workspace=None, settings=off)
        assert (config.respond_to, config.followups_need_mention, config.origins["respond_to"]) == (
            "mentions", True, "settings")


def test_a_level_with_only_the_older_field_is_read_as_respond_to_and_respond_to_wins_at_its_level() -> None:
    base = settings(slack_thread_followups=True)
    legacy = ChannelSettings(followups_need_mention=True)
    config = resolve(SLACK, channel=legacy, workspace=None, settings=base)
    assert (config.respond_to, config.answers_followups, config.answers_everything) == ("mentions", False, False)
    assert config.origins["respond_to"] == config.origins["followups_need_mention"] == "slack:T1:CHELP"
    both = ChannelSettings(followups_need_mention=True, respond_to="all")
    config = resolve(SLACK, channel=both, workspace=None, settings=base)
    assert (config.respond_to, config.followups_need_mention, config.answers_everything) == ("all", False, True)
    # The channel's older field wins over the workspace's respond_to: the nearer level decides.
    config = resolve(SLACK, channel=ChannelSettings(followups_need_mention=False),
                     workspace=ChannelSettings(respond_to="all"), settings=base)
    assert config.respond_to == "threads"
    assert resolve(SLACK, channel=None, workspace=ChannelSettings(respond_to="all"), settings=base).respond_to == "all"


def test_values_are_read_and_checked_and_a_change_clears_the_other_spelling() -> None:
    assert parse_value("respond_to", " ALL ") == "all"
    with pytest.raises(ChannelSettingsError, match="mentions, threads, all"):
        parse_value("respond_to", "everything")
    with pytest.raises(ChannelSettingsError):
        ChannelSettings.from_json({"respond_to": "some"})
    assert parse_changes(["respond_to=all"]) == ({"respond_to": "all"}, ["followups_need_mention"])
    assert parse_changes(["followups_need_mention=no"]) == ({"followups_need_mention": False}, ["respond_to"])
    assert parse_changes(["respond_to="]) == ({}, ["respond_to", "followups_need_mention"])
    assert superseded({"respond_to": "all", "followups_need_mention": True}) == []
    assert cleared_with(["respond_to", "followups_need_mention"]) == []


def test_all_is_refused_only_where_the_platform_cannot_read_every_message() -> None:
    without = settings(discord_message_content_intent=False)
    refusal = respond_to_refusal({"respond_to": "all"}, without.platform_defaults("discord"))
    assert refusal is not None and "Message Content intent is off" in refusal
    assert respond_to_refusal({"respond_to": "threads"}, without.platform_defaults("discord")) is None
    assert respond_to_refusal({"respond_to": "all"}, without.platform_defaults("slack")) is None
    with_intent = settings(discord_message_content_intent=True)
    assert respond_to_refusal({"respond_to": "all"}, with_intent.platform_defaults("discord")) is None
