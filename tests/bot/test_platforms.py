"""The platform table: one entry per platform, each naming its settings group, scope word and emulator."""

from __future__ import annotations

import importlib

from bot.channels_cli import SCOPE_HELP, dm_target, parse_scope
from bot.platforms import PLATFORMS, by_name
from core.config import Settings


def test_every_entry_names_its_settings_group_and_an_emulator_that_exists() -> None:
    assert [platform.name for platform in PLATFORMS] == ["slack", "discord"]
    for platform in PLATFORMS:
        assert platform.settings.platform == platform.name
        module, _, name = platform.emulator.partition(":")
        assert isinstance(getattr(importlib.import_module(module), name), type), platform.emulator
        assert platform.channel_scope in SCOPE_HELP and platform.workspace_scope in SCOPE_HELP


def test_an_entry_says_whether_the_process_serves_it_from_its_group() -> None:
    slack, discord = by_name()["slack"], by_name()["discord"]
    settings = Settings(_env_file=None, slack_bot_token="xoxb-1")
    assert slack.configured(settings) and not discord.configured(settings)
    assert discord.configured(Settings(_env_file=None, discord_token="t"))


def test_the_channels_cli_reads_scopes_and_dm_audiences_from_the_table() -> None:
    assert parse_scope("discord:G1:C1") == ("discord", "G1", "C1")
    # A platform whose DMs belong to no workspace is named bare; the others by workspace.
    assert dm_target("discord") == "discord:@dm:dms" and dm_target("slack:T1") == "slack:T1:dms"
