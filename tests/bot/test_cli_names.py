"""Names, not ids, in the CLI (issue 27): `#channel` and `@person` resolved through each platform's paced door against
the emulators, an ambiguous or unknown name refused (exit 2) with the candidates, and names printed beside ids."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.channels_cli import channels
from bot.cli import build_parser
from bot.sources_cli import sources
from bot.usage_cli import usage
from core.config import Settings
from core.retrieval.ingest import IngestRequest, ingest
from core.store.db import Database
from core.store.usage import TurnUsage, UsageLog
from tests.emulators.discord import DiscordEmulator
from tests.emulators.slack import SlackEmulator
from tests.support.engine import test_settings as make_settings
from tests.support.relaybot_process import reachable_workdir, run_relaybot

REPO = Path(__file__).resolve().parents[2]
# More channels than one page of conversations.list (200): the names are read across a cursor.
FILLER_CHANNELS = 230


def slack_world(slack: SlackEmulator) -> None:
    slack.add_channel("C0HELP", name="help")
    slack.add_channel("C0RANDOM", name="random")
    slack.add_channel("G0SECRET", name="secret", private=True, members=["U0SAM"])
    slack.add_channel("G0HIDDEN", name="hidden", private=True, members=["U0SAM"])
    slack.remove_bot_from("G0HIDDEN")  # a private channel the bot is not in: Slack does not list it
    for n in range(FILLER_CHANNELS):
        slack.add_channel(f"C1{n:05d}", name=f"filler-{n}")
    slack.add_channel("C0TWIN1", name="twin")
    slack.add_channel("C0TWIN2", name="Twin")
    # Two people with the same display name, told apart by their real names.
    slack.add_user("U0ALEX1", name="alex", real_name="Alex Smith")
    slack.add_user("U0ALEX2", name="alex", real_name="Alex Jones")
    slack.add_user("U0SAM", name="sam", real_name="Sam Reed")


def slack_settings(slack: SlackEmulator, database_url: str, data_dir: Path, **more: Any) -> Settings:
    return make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=data_dir,
                         slack_bot_token=slack.bot_token, slack_api_url=slack.api_url, **more)


async def cli(settings: Settings, *argv: str) -> int:
    args = build_parser().parse_args(list(argv))
    command = {"channels": channels, "sources": sources, "usage": usage}[argv[0]]
    return await command(settings, args)


async def test_a_channel_and_people_named_on_slack_are_stored_as_their_ids_and_shown_beside_them(
    slack_emulator: SlackEmulator, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    slack_world(slack_emulator)
    settings = slack_settings(slack_emulator, database_url, tmp_path)
    team = slack_emulator.team_id
    slack_emulator.fail_next("users.list")  # a 429: the door waits it out and asks again

    assert await cli(settings, "channels", "set", f"slack:{team}:#help", "model=big", "approvers=@sam,U0ALEX2") == 0
    assert [c.status for c in slack_emulator.calls if c.method == "users.list"][:2] == [429, 200]
    out = capsys.readouterr().out
    assert f"slack:{team}:C0HELP" in out and "U0SAM, U0ALEX2" in out
    # A name past the first page, and a private channel the bot is in.
    assert await cli(settings, "channels", "set", f"slack:{team}:#filler-{FILLER_CHANNELS - 1}", "model=x") == 0
    assert await cli(settings, "channels", "set", f"slack:{team}:#SECRET", "model=y") == 0  # case does not matter
    capsys.readouterr()

    assert await cli(settings, "channels", "show", f"slack:{team}:#help") == 0
    shown = capsys.readouterr().out
    assert shown.splitlines()[0] == f"slack:{team}:C0HELP (#help)"
    assert "U0ALEX2 (@alex), U0SAM (@sam)" in shown and "big" in shown

    assert await cli(settings, "channels", "list") == 0
    listing = capsys.readouterr().out
    assert f"slack:{team}:C0HELP (#help)  " in listing and f"(#filler-{FILLER_CHANNELS - 1})" in listing
    assert f"slack:{team}:G0SECRET (#secret)" in listing and "U0SAM (@sam)" in listing

    # Every call went through the door's budget (the door check of tests/conftest.py), paged by cursor.
    lists = [c for c in slack_emulator.calls if c.method == "conversations.list"]
    # Several commands in a row outrun the emulator's Tier 2 limit: the 429s are waited out, never an error.
    assert any(c.params.get("cursor") for c in lists) and {c.status for c in lists} <= {200, 429}
    assert all(c.params.get("types") == "public_channel,private_channel" for c in lists)
    assert "users.list" in slack_emulator.call_names()


async def test_an_ambiguous_or_unknown_name_is_refused_with_the_candidates_and_nothing_changes(
    slack_emulator: SlackEmulator, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    slack_world(slack_emulator)
    settings = slack_settings(slack_emulator, database_url, tmp_path)
    team = slack_emulator.team_id

    assert await cli(settings, "channels", "set", f"slack:{team}:C0RANDOM", "approvers=@alex") == 2
    err = capsys.readouterr().err
    assert "@alex could be any of 2 people" in err
    assert "alex (U0ALEX1, Alex Smith)" in err and "alex (U0ALEX2, Alex Jones)" in err
    assert await cli(settings, "channels", "set", f"slack:{team}:#twin", "model=x") == 2
    err = capsys.readouterr().err
    assert "C0TWIN1" in err and "C0TWIN2" in err
    assert await cli(settings, "channels", "set", f"slack:{team}:#hidden", "model=x") == 2  # the bot is not in it
    assert "no channel" in capsys.readouterr().err
    assert await cli(settings, "channels", "set", f"slack:{team}:#help", "approvers=@nobody") == 2
    assert "no person" in capsys.readouterr().err

    assert await cli(settings, "channels", "list") == 0
    listing = capsys.readouterr().out
    assert "C0RANDOM" not in listing and "C0TWIN" not in listing and "U0ALEX1" not in listing  # nothing was written

    # A person's real name answers too, when it is theirs alone.
    assert await cli(settings, "channels", "set", f"slack:{team}:#help", "approvers=@Alex Jones") == 0
    assert "U0ALEX2" in capsys.readouterr().out


async def test_one_command_reads_each_list_once(
    slack_emulator: SlackEmulator, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    slack_world(slack_emulator)
    settings = slack_settings(slack_emulator, database_url, tmp_path)
    team = slack_emulator.team_id
    await cli(settings, "channels", "set", f"slack:{team}:C0HELP", "approvers=U0SAM,U0ALEX1")
    await cli(settings, "channels", "set", f"slack:{team}:C100001", "approvers=U0SAM")
    before = len(slack_emulator.calls)
    assert await cli(settings, "channels", "list") == 0
    capsys.readouterr()
    made = [c.method for c in slack_emulator.calls[before:]]
    pages = -(-(FILLER_CHANNELS + 6) // 200)
    assert made.count("conversations.list") == pages and made.count("users.list") == 1


async def test_a_source_is_granted_to_a_channel_by_name_and_its_grants_are_shown_named(
    slack_emulator: SlackEmulator, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    slack_world(slack_emulator)
    settings = slack_settings(slack_emulator, database_url, tmp_path)
    team = slack_emulator.team_id
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\ntext\n")
    db = Database(url=database_url, data_dir=tmp_path)
    await db.open()
    try:
        await ingest(db, IngestRequest(source="handbook", exposure="prefetch", targets=[str(tmp_path / "docs")]),
                     embedder=None)
    finally:
        await db.close()

    assert await cli(settings, "sources", "restrict", "handbook") == 0
    assert await cli(settings, "sources", "grant", "handbook", "--channel", f"slack:{team}:#help") == 0
    assert f"slack:{team}:C0HELP may now read" in capsys.readouterr().out
    assert await cli(settings, "sources", "access") == 0
    assert f"handbook  restricted; granted to slack:{team}:C0HELP (#help)" in capsys.readouterr().out
    assert await cli(settings, "sources", "revoke", "handbook", "--channel", f"slack:{team}:#help") == 0
    assert "no longer reads" in capsys.readouterr().out
    assert await cli(settings, "sources", "grant", "handbook", "--channel", f"slack:{team}:#twin") == 2
    await cli(settings, "sources", "remove", "handbook")


async def test_where_the_platform_cannot_be_read_ids_show_alone_with_one_line_saying_so(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # Slack configured, but nothing listens where its API is said to be.
    settings = make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=tmp_path,
                             slack_bot_token="xoxb-nowhere", slack_api_url="http://127.0.0.1:9/api/")
    assert await cli(settings, "channels", "set", "slack:T9:C9", "approvers=U9") == 0
    capsys.readouterr()
    assert await cli(settings, "channels", "list") == 0
    captured = capsys.readouterr()
    assert "slack:T9:C9  approvers=U9  (by" in captured.out and "(#" not in captured.out
    notes = [line for line in captured.err.splitlines() if "Names could not be read" in line]
    assert len(notes) == 1 and "slack" in notes[0]
    # A name where the platform cannot be read is refused: there is no id to store.
    assert await cli(settings, "channels", "set", "slack:T9:#help", "model=x") == 2
    assert "cannot read slack's channels" in capsys.readouterr().err


async def test_without_the_scope_to_list_channels_ids_show_alone_and_a_name_is_refused_saying_which_scope(
    slack_emulator: SlackEmulator, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    slack_world(slack_emulator)
    slack_emulator.refuse("conversations.list", "missing_scope")
    settings = slack_settings(slack_emulator, database_url, tmp_path)
    team = slack_emulator.team_id
    assert await cli(settings, "channels", "set", f"slack:{team}:C0SCOPE", "approvers=@sam") == 0  # people still read
    capsys.readouterr()
    assert await cli(settings, "channels", "show", f"slack:{team}:C0SCOPE") == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == f"slack:{team}:C0SCOPE" and "U0SAM (@sam)" in captured.out
    assert "channels:read and groups:read scope" in captured.err
    assert await cli(settings, "channels", "set", f"slack:{team}:#help", "model=x") == 2
    assert "channels:read and groups:read scope" in capsys.readouterr().err


async def test_the_slack_token_of_another_workspace_names_nothing_here(
    slack_emulator: SlackEmulator, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    slack_world(slack_emulator)
    settings = slack_settings(slack_emulator, database_url, tmp_path)
    assert await cli(settings, "channels", "set", "slack:T0OTHER:#help", "model=x") == 2
    assert f"for workspace {slack_emulator.team_id}, not T0OTHER" in capsys.readouterr().err


async def test_usage_by_user_names_people_and_takes_one_by_name(
    slack_emulator: SlackEmulator, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    slack_world(slack_emulator)
    settings = slack_settings(slack_emulator, database_url, tmp_path)
    team = slack_emulator.team_id
    db = Database(url=database_url, data_dir=tmp_path)
    await db.open()
    try:
        log = UsageLog(db)
        for user, tokens in (("U0SAM", 10), ("U0ALEX1", 20), ("U0ALEX2", 30)):
            await _record(log, platform="slack", workspace=team, channel="C0HELP", user=user, tokens=tokens)
    finally:
        await db.close()
    assert await cli(settings, "usage", "--by", "user") == 0
    table = capsys.readouterr().out
    assert any(line.split()[:3] == ["slack", "U0SAM", "@sam"] for line in table.splitlines())
    assert await cli(settings, "usage", "--user", "slack:@sam", "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["user"], r["name"]) for r in rows] == [("U0SAM", "@sam")]
    assert await cli(settings, "usage", "--user", "slack:@alex") == 2
    assert "U0ALEX1" in capsys.readouterr().err
    assert await cli(settings, "usage", "--by", "channel") == 0
    assert "#help" in capsys.readouterr().out


async def _record(log: UsageLog, *, platform: str, workspace: str, channel: str, user: str, tokens: int) -> None:
    await log.add(TurnUsage(turn_id=str(uuid.uuid4()), platform=platform, workspace=workspace, channel=channel,
                            user=user, model="test-model", prompt_tokens=tokens, completion_tokens=0))


# ---- Discord ---------------------------------------------------------------------------------------------------


def discord_world(dc: DiscordEmulator) -> dict[str, int]:
    guild = dc.add_guild("Team")
    ids = {"guild": guild, "general": dc.add_channel(guild, "general"), "help": dc.add_channel(guild, "help")}
    ids["alex1"], ids["alex2"] = dc.add_user("alex"), dc.add_user("alex")
    ids["sam"] = dc.add_user("sam")
    other = dc.add_guild("Elsewhere")
    ids["other_help"] = dc.add_channel(other, "help")  # the same name in another guild: the scope's guild decides
    return ids


def discord_settings(dc: DiscordEmulator, database_url: str, data_dir: Path) -> Settings:
    return make_settings("http://127.0.0.1:9/v1", database_url=database_url, data_dir=data_dir,
                         discord_token=dc.token, discord_api_base=dc.api_base)


async def test_a_channel_and_a_member_named_on_discord_are_read_per_guild(
    discord_emulator: DiscordEmulator, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    ids = discord_world(discord_emulator)
    settings = discord_settings(discord_emulator, database_url, tmp_path)
    guild = ids["guild"]

    assert await cli(settings, "channels", "set", f"discord:{guild}:#help", "approvers=@sam") == 0
    assert f"discord:{guild}:{ids['help']}" in capsys.readouterr().out
    assert await cli(settings, "channels", "show", f"discord:{guild}:#help") == 0
    shown = capsys.readouterr().out
    assert shown.splitlines()[0] == f"discord:{guild}:{ids['help']} (#help)" and f"{ids['sam']} (@sam)" in shown
    assert await cli(settings, "channels", "set", f"discord:{guild}:#help", "approvers=@alex") == 2
    err = capsys.readouterr().err
    assert "could be any of 2 people" in err and str(ids["alex1"]) in err and str(ids["alex2"]) in err

    # DMs have no names: showing a DM's settings asks Discord nothing, not even a login.
    before = len(discord_emulator.world.request_log)
    assert await cli(settings, "channels", "show", "discord:@dm:123") == 0
    assert capsys.readouterr().out.startswith("discord:@dm:123\n") and len(discord_emulator.world.request_log) == before

    # A report's rows name no guild: the people of every guild the bot is in are read.
    db = Database(url=database_url, data_dir=tmp_path)
    await db.open()
    try:
        await _record(UsageLog(db), platform="discord", workspace=str(guild), channel=str(ids["help"]),
                      user=str(ids["sam"]), tokens=5)
    finally:
        await db.close()
    assert await cli(settings, "usage", "--by", "user", "--format", "csv") == 0
    assert f"discord,{ids['sam']},@sam," in capsys.readouterr().out

    routes = [r.route for r in discord_emulator.world.request_log]
    assert "guild_channels_list" in routes and "guild_members_list" in routes and "my_guilds_list" in routes
    assert all(r.status == 200 for r in discord_emulator.world.request_log if r.route.startswith("guild_"))


# ---- the real CLI ----------------------------------------------------------------------------------------------


@pytest.fixture
def workdir() -> Iterator[Path]:
    with reachable_workdir("relaybot-names-") as path:
        yield path


def _env(database_url: str, workdir: Path, **values: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE", "TMPDIR")}
    return {**keep, "PYTHONPATH": str(REPO), "DATABASE_URL": database_url, "DATA_DIR": str(workdir / "data"),
            "EMBEDDING_PROVIDER": "none", "LLM_BASE_URL": "http://127.0.0.1:9/v1", **values}


async def test_the_relaybot_command_takes_names_on_slack(
    slack_emulator: SlackEmulator, database_url: str, workdir: Path,
) -> None:
    slack_world(slack_emulator)
    team = slack_emulator.team_id
    env = _env(database_url, workdir, SLACK_BOT_TOKEN=slack_emulator.bot_token, SLACK_API_URL=slack_emulator.api_url)
    code, out, err = await run_relaybot("channels", "set", f"slack:{team}:#random", "approvers=@sam", env=env, cwd=workdir)
    assert code == 0, err
    assert f"slack:{team}:C0RANDOM" in out and "U0SAM" in out
    code, out, err = await run_relaybot("channels", "show", f"slack:{team}:#random", env=env, cwd=workdir)
    assert code == 0, err
    assert out.splitlines()[0] == f"slack:{team}:C0RANDOM (#random)" and "U0SAM (@sam)" in out
    code, out, err = await run_relaybot("channels", "set", f"slack:{team}:#random", "approvers=@alex", env=env, cwd=workdir)
    assert code == 2 and "U0ALEX1" in err and "U0ALEX2" in err and "Traceback" not in err
    assert {"conversations.list", "users.list"} <= set(slack_emulator.call_names())


async def test_the_relaybot_command_takes_names_on_discord(
    discord_emulator: DiscordEmulator, database_url: str, workdir: Path,
) -> None:
    ids = discord_world(discord_emulator)
    guild = ids["guild"]
    env = _env(database_url, workdir, DISCORD_TOKEN=discord_emulator.token, DISCORD_API_BASE=discord_emulator.api_base)
    code, out, err = await run_relaybot("channels", "set", f"discord:{guild}:#general", "model=m", env=env, cwd=workdir)
    assert code == 0, err
    assert f"discord:{guild}:{ids['general']}" in out
    code, out, err = await run_relaybot("channels", "list", env=env, cwd=workdir)
    assert code == 0 and f"discord:{guild}:{ids['general']} (#general)" in out
    code, out, err = await run_relaybot("channels", "set", f"discord:{guild}:#general", "approvers=@alex", env=env,
                                        cwd=workdir)
    assert code == 2 and str(ids["alex1"]) in err and "Traceback" not in err
