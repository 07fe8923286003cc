"""`relaybot sources add-channel | remove-channel` and the learned channels in `relaybot sources`, as an admin runs them:
against the real Postgres and the Slack emulator through Slack's own door (Platform.channel_history), a channel named as
the channels CLI names one, and each refusal one sentence with exit code 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from bot.cli import build_parser
from bot.sources_cli import sources
from core.config import Settings
from tests.emulators.discord import DiscordEmulator
from tests.emulators.slack import SlackEmulator
from tests.support.engine import test_settings as make_settings


@pytest.fixture(autouse=True)
def no_learned_channels(database_url: str) -> None:
    """The module's tests share a database, and the emulators' team and channel ids: each starts with no channel chosen."""
    with psycopg.connect(database_url) as conn:
        if conn.execute("SELECT to_regclass('learned_channels')").fetchone() != (None,):
            conn.execute("DELETE FROM sources WHERE kind = 'channel'")


def slack_settings(slack: SlackEmulator, database_url: str, data_dir: Path, **more: Any) -> Settings:
    return make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=data_dir,
                         slack_bot_token=slack.bot_token, slack_api_url=slack.api_url, **more)


async def cli(settings: Settings, *argv: str) -> int:
    return await sources(settings, build_parser().parse_args(["sources", *argv]))


def learned_rows(database_url: str) -> list[tuple[str, str, int, int | None]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT channel, name, since_days, keep_days FROM learned_channels ORDER BY channel").fetchall()


def slack_world(slack: SlackEmulator) -> None:
    slack.add_channel("C0INCID", name="incidents", members=["U0ANA"])
    slack.add_user_message("C0INCID", "the deploy failed at noon", "U0ANA")
    slack.add_channel("C0TWIN1", name="twin")
    slack.add_channel("C0TWIN2", name="Twin")
    slack.add_channel("C0OUT", name="outside")
    slack.remove_bot_from("C0OUT")
    slack.set_dm_user("D0SAM", "U0SAM")


async def test_an_admin_adds_a_channel_by_name_sees_its_state_and_removes_it(
    slack_emulator: SlackEmulator, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    slack_world(slack_emulator)
    settings = slack_settings(slack_emulator, database_url, tmp_path)
    team = slack_emulator.team_id

    assert await cli(settings, "add-channel", f"slack:{team}:#incidents", "--since", "30d", "--keep", "365d") == 0
    out = capsys.readouterr().out
    assert f"Learning from #incidents (slack:{team}:C0INCID)" in out and "last 30 days" in out and "kept 365 days" in out
    assert learned_rows(database_url) == [("C0INCID", "incidents", 30, 365)]

    # `relaybot sources` alone lists; no bot runs here, so nothing has been read yet.
    assert await cli(settings) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0] == "Channels learned from:"
    assert listing[2].split()[:4] == [f"slack:{team}:C0INCID", "#incidents", "30d", "365d"]
    assert listing[2].split()[-1] == "backfilling"

    # Added again: further back, and kept as long as before (not given).
    assert await cli(settings, "add-channel", f"slack:{team}", "#incidents", "--since", "90d") == 0
    assert "now reads its last 90 days" in capsys.readouterr().out
    assert learned_rows(database_url) == [("C0INCID", "incidents", 90, 365)]

    assert await cli(settings, "remove-channel", f"slack:{team}", "#incidents") == 0
    assert f"Stopped learning from #incidents (slack:{team}:C0INCID)" in capsys.readouterr().out
    assert learned_rows(database_url) == []
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM sources WHERE kind = 'channel'").fetchone() == (0,)
    assert await cli(settings, "remove-channel", f"slack:{team}:C0INCID") == 2
    assert f"learns from no channel slack:{team}:C0INCID" in capsys.readouterr().err


async def test_each_refusal_is_one_sentence_with_exit_2_and_nothing_is_stored(
    slack_emulator: SlackEmulator, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    slack_world(slack_emulator)
    settings = slack_settings(slack_emulator, database_url, tmp_path)
    team = slack_emulator.team_id
    refusals = {
        f"slack:{team}:D0SAM": "never learned from",  # a DM
        f"slack:{team}:C0OUT": "/invite",  # the bot is not in it: Slack's not_in_channel, with what to do
        f"slack:{team}:#twin": "could be any of 2 channels",  # ambiguous: the candidates named
        f"slack:{team}:#nope": "is called #nope",  # no such channel
    }
    for place, sentence in refusals.items():
        assert await cli(settings, "add-channel", place) == 2, place
        err = capsys.readouterr().err
        assert sentence in err and "Traceback" not in err, (place, err)
    assert await cli(settings, "add-channel", f"slack:{team}:#incidents", "--since", "90d", "--keep", "30d") == 2
    assert "--keep 30d is shorter than --since 90d" in capsys.readouterr().err
    # Slack refusing the token: what it said, exit 1, nothing stored.
    slack_emulator.fail_next("conversations.info", error="invalid_auth")
    assert await cli(settings, "add-channel", f"slack:{team}:C0INCID") == 1
    err = capsys.readouterr().err
    assert "slack could not be read (invalid_auth" in err and "nothing was changed" in err and "Traceback" not in err, err
    assert learned_rows(database_url) == []


async def test_without_the_platforms_token_the_channel_cannot_be_read_and_that_is_said(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    settings = make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=tmp_path)
    assert await cli(settings, "add-channel", "slack:T1:C1") == 2
    err = capsys.readouterr().err
    assert "slack is not configured here (SLACK_BOT_TOKEN is not set)" in err, err
    for wrong in (["add-channel", "slack", "C1"], ["remove-channel", "slack:T1"]):
        assert await cli(settings, *wrong) == 2
        assert "is not a channel" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["sources", "add-channel", "slack:T1:C1", "--since", "36h"])
    assert exited.value.code == 2


async def test_a_discord_channel_is_added_by_name_in_its_guild_and_refused_without_the_message_content_intent(
    discord_emulator: DiscordEmulator, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    guild = discord_emulator.add_guild("Team")
    ops = discord_emulator.add_channel(guild, "ops")
    discord_emulator.add_channel(discord_emulator.add_guild("Elsewhere"), "ops")  # the scope's guild decides
    settings = make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=tmp_path,
                             discord_token=discord_emulator.token, discord_api_base=discord_emulator.api_base,
                             discord_message_content_intent=True)

    assert await cli(settings, "add-channel", f"discord:{guild}:#ops", "--keep", "0") == 0
    out = capsys.readouterr().out
    assert f"Learning from #ops (discord:{guild}:{ops})" in out and "kept until it is removed" in out
    assert learned_rows(database_url) == [(str(ops), "ops", 90, None)]  # LEARN_SINCE_DAYS by default
    assert await cli(settings, "list", "--team", f"discord:{guild}") == 0
    assert f"discord:{guild}:{ops}" in capsys.readouterr().out
    assert await cli(settings, "list", "--team", "discord:999") == 0
    assert f"discord:{guild}:{ops}" not in capsys.readouterr().out
    assert await cli(settings, "remove-channel", f"discord:{guild}:{ops}") == 0
    capsys.readouterr()

    # REST history reads blank without the intent (DISCORD_MESSAGE_CONTENT_INTENT not set): refused with what to
    # do, before anything is stored.
    off = make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=tmp_path,
                        discord_token=discord_emulator.token, discord_api_base=discord_emulator.api_base)
    assert await cli(off, "add-channel", f"discord:{guild}:#ops") == 2
    err = capsys.readouterr().err
    assert "Message Content" in err and "Traceback" not in err, err
    assert learned_rows(database_url) == []


async def test_a_learned_channel_is_not_given_to_another_team_or_a_link_base(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    settings = make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=tmp_path)
    for argv in (["set-team", "channel:slack:T1:C1", "T2"], ["set-link-base", "channel:slack:T1:C1", "https://x.example/"]):
        assert await cli(settings, *argv) == 2
        assert "is a channel learned from" in capsys.readouterr().err
