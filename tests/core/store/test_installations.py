"""Slack installs on Postgres: Bolt's stores over core/store/installations.py, tokens sealed at rest, org-wide installs,
the OAuth state used once, and a rotating token refreshed once however many refresh it at once (issue 25)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from slack_sdk.oauth.installation_store import Installation
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.installations import Sealer, SecretKeyError, SlackInstallations, SlackOAuthStates
from adapters.slack.team_tokens import NotInstalled, TeamKey
from adapters.slack.transport_oauth import SlackOAuthCalls
from core.store.db import Database
from core.store.installations import InstallStore
from tests.emulators.slack.oauth import DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET
from tests.emulators.slack.server import SlackEmulator

KEY = "a passphrase that is long enough to seal tokens"


def _installation(team_id: str | None, *, enterprise_id: str | None = None, org_wide: bool = False,
                  bot_token: str = "xoxb-secret-bot", user_id: str = "UINST", **extra: object) -> Installation:
    return Installation(
        app_id="A1", enterprise_id=enterprise_id, team_id=team_id, team_name="Team", bot_token=bot_token,
        bot_id="B1", bot_user_id="UB1", bot_scopes="chat:write,commands", user_id=user_id,
        user_token="xoxp-secret-user", is_enterprise_install=org_wide, **extra,  # type: ignore[arg-type]
    )


def _installations(db: Database, **kwargs: object) -> SlackInstallations:
    return SlackInstallations(InstallStore(db), sealer=Sealer(KEY), client_id=DEFAULT_CLIENT_ID, **kwargs)  # type: ignore[arg-type]


async def test_an_install_is_found_again_and_its_raw_rows_hold_no_token(db: Database) -> None:
    store = _installations(db)
    await store.async_save(_installation("TSAVE1"))
    bot = await store.async_find_bot(enterprise_id=None, team_id="TSAVE1")
    assert bot is not None and bot.bot_token == "xoxb-secret-bot" and bot.bot_scopes == ["chat:write", "commands"]
    found = await store.async_find_installation(enterprise_id=None, team_id="TSAVE1")
    assert found is not None and found.user_token == "xoxp-secret-user" and found.bot_token == "xoxb-secret-bot"
    assert await store.bot_token(TeamKey("TSAVE1")) == "xoxb-secret-bot"
    async with db.connection() as conn:
        rows = await (await conn.execute(
            "SELECT fields::text, sealed FROM slack_bots WHERE team_id = 'TSAVE1'"
            " UNION ALL SELECT fields::text, sealed FROM slack_installers WHERE team_id = 'TSAVE1'"
        )).fetchall()
    assert len(rows) == 2
    for fields, sealed in rows:
        for secret in (b"xoxb-secret-bot", b"xoxp-secret-user"):
            assert secret.decode() not in fields and secret not in bytes(sealed)
    with pytest.raises(NotInstalled):
        await store.bot_token(TeamKey("TNEVER"))


async def test_an_org_wide_install_answers_for_every_workspace_of_its_org_and_no_other(db: Database) -> None:
    store = _installations(db)
    await store.async_save(_installation(None, enterprise_id="EORG1", org_wide=True, bot_token="xoxb-org"))
    assert await store.bot_token(TeamKey("TIN1", "EORG1")) == "xoxb-org"
    assert await store.bot_token(TeamKey("TIN2", "EORG1")) == "xoxb-org"
    for outside in (TeamKey("TIN1"), TeamKey("TIN1", "EOTHER")):
        with pytest.raises(NotInstalled):
            await store.bot_token(outside)
    # A workspace of the org installed on its own keeps its own bot.
    await store.async_save(_installation("TOWN", enterprise_id="EORG1", bot_token="xoxb-own"))
    assert await store.bot_token(TeamKey("TOWN", "EORG1")) == "xoxb-own"
    bot = await store.async_find_bot(enterprise_id="EORG1", team_id="TIN1", is_enterprise_install=True)
    assert bot is not None and bot.is_enterprise_install and bot.bot_token == "xoxb-org"


async def test_deleting_removes_the_tokens_at_once_and_a_reinstall_brings_them_back(db: Database) -> None:
    store = _installations(db)
    await store.async_save(_installation("TDEL1", bot_token="xoxb-first"))
    assert await store.bot_token(TeamKey("TDEL1")) == "xoxb-first"  # now cached in this process
    await store.async_delete_bot(enterprise_id=None, team_id="TDEL1")
    with pytest.raises(NotInstalled):
        await store.bot_token(TeamKey("TDEL1"))
    assert await store.async_find_installation(enterprise_id=None, team_id="TDEL1") is not None
    await store.async_delete_installation(enterprise_id=None, team_id="TDEL1", user_id="UINST")
    assert await store.async_find_installation(enterprise_id=None, team_id="TDEL1") is None
    await store.async_save(_installation("TDEL1", bot_token="xoxb-again"))
    await store.async_delete_all(enterprise_id=None, team_id="TDEL1")
    assert await store.async_find_bot(enterprise_id=None, team_id="TDEL1") is None
    assert await store.async_find_installation(enterprise_id=None, team_id="TDEL1") is None
    await store.async_save(_installation("TDEL1", bot_token="xoxb-third"))
    assert await store.bot_token(TeamKey("TDEL1")) == "xoxb-third"


async def test_an_uninstall_event_inside_an_org_removes_the_org_wide_install(db: Database) -> None:
    store = _installations(db)
    await store.async_save(_installation(None, enterprise_id="EORG2", org_wide=True, bot_token="xoxb-org2"))
    await store.async_delete_all(enterprise_id="EORG2", team_id="TINORG2")
    with pytest.raises(NotInstalled):
        await store.bot_token(TeamKey("TINORG2", "EORG2"))


async def test_the_oauth_state_is_consumed_once_and_refused_once_expired(db: Database) -> None:
    states = SlackOAuthStates(InstallStore(db))
    state = await states.async_issue()
    assert await states.async_consume(state)
    assert not await states.async_consume(state)
    assert not await states.async_consume("never-issued")
    late = await states.async_issue()
    async with db.connection() as conn:
        await conn.execute("UPDATE slack_oauth_states SET expires_at = now() - interval '1 second' WHERE state = %s",
                           (late,))
    assert not await states.async_consume(late)


def test_key_rotation_reads_rows_sealed_with_the_old_key_and_a_missing_key_is_refused() -> None:
    old = Fernet.generate_key().decode()
    sealed = Sealer(old).seal({"bot_token": "xoxb-1"})
    assert Sealer(f"{KEY},{old}").open(sealed) == {"bot_token": "xoxb-1"}
    resealed = Sealer(f"{KEY},{old}").seal({"bot_token": "xoxb-1"})
    assert Sealer(KEY).open(resealed) == {"bot_token": "xoxb-1"}
    with pytest.raises(SecretKeyError):
        Sealer(KEY).open(sealed)
    for bad in ("", "short"):
        with pytest.raises(SecretKeyError):
            Sealer(bad)


@pytest.mark.parametrize("processes", [1, 2])
async def test_refreshing_at_once_ends_with_one_valid_token(db: Database, database_url: str, tmp_path: Path,
                                                            processes: int) -> None:
    """Many tasks (and with 2, a second process's pool and store) refresh an expiring token at once: one refresh
    reaches Slack, none is refused for a used refresh token, and all end with the same token Slack accepts."""
    other = Database(url=database_url, data_dir=tmp_path / "other")
    await other.open()
    try:
        async with SlackEmulator(limits=False) as slack:
            client = AsyncWebClient(base_url=slack.api_url)
            calls = SlackOAuthCalls(client, client_id=DEFAULT_CLIENT_ID, client_secret=DEFAULT_CLIENT_SECRET)
            stores = [SlackInstallations(InstallStore(pool), sealer=Sealer(KEY), client_id=DEFAULT_CLIENT_ID, calls=calls)
                      for pool in (db, other)[:processes]]
            team = f"TROT{processes}"
            slack.add_team(team)
            slack.oauth.rotate(expires_in=43200)
            first = slack.oauth.issue(team, None)
            await stores[0].async_save(_installation(team, bot_token=first.access_token,
                                                     bot_refresh_token=first.refresh_token,
                                                     bot_token_expires_at=int(time.time()) + 60))
            tokens = await asyncio.gather(*(stores[i % processes].bot_token(TeamKey(team)) for i in range(8)))
            assert len(set(tokens)) == 1 and tokens[0] != first.access_token
            refreshes = [c for c in slack.calls if c.method == "oauth.v2.access"]
            assert len(refreshes) == 1 and refreshes[0].error is None
            assert slack.oauth.state.refused_refreshes == 0
            assert tokens[0] in slack.oauth.tokens_of(team)
            # Fresh now: later calls use it without refreshing again.
            assert await stores[-1].bot_token(TeamKey(team)) == tokens[0]
            assert len([c for c in slack.calls if c.method == "oauth.v2.access"]) == 1
    finally:
        await other.close()


async def test_a_refused_refresh_is_logged_kept_and_tried_again_on_the_next_call(
    db: Database, caplog: pytest.LogCaptureFixture,
) -> None:
    async with SlackEmulator(limits=False) as slack:
        client = AsyncWebClient(base_url=slack.api_url)
        calls = SlackOAuthCalls(client, client_id=DEFAULT_CLIENT_ID, client_secret=DEFAULT_CLIENT_SECRET)
        store = _installations(db, calls=calls)
        slack.add_team("TFAIL")
        slack.oauth.rotate(expires_in=43200)
        first = slack.oauth.issue("TFAIL", None)
        await store.async_save(_installation("TFAIL", bot_token=first.access_token, bot_refresh_token="xoxe-unknown",
                                             bot_token_expires_at=int(time.time()) + 60))
        with caplog.at_level(logging.WARNING, logger="adapters.slack.installations"):
            # Not expired yet: the old token still serves while the refresh fails.
            assert await store.bot_token(TeamKey("TFAIL")) == first.access_token
        assert "could not refresh the Slack bot token of team TFAIL (invalid_refresh_token)" in caplog.text
        stored = await InstallStore(db).bot(enterprise_id="", team_id="TFAIL")
        assert stored is not None and stored.refresh_error == "invalid_refresh_token"
        await store.bot_token(TeamKey("TFAIL"))
        assert len([c for c in slack.calls if c.method == "oauth.v2.access"]) == 2


async def test_a_bot_saved_alone_replaces_the_bots_token_and_keeps_who_installed_it(db: Database) -> None:
    store = _installations(db)
    await store.async_save(_installation("TBOT1", bot_token="xoxb-before"))
    bot = await store.async_find_bot(enterprise_id=None, team_id="TBOT1")
    assert bot is not None
    bot.bot_token = "xoxb-after"
    await store.async_save_bot(bot)
    assert await store.bot_token(TeamKey("TBOT1")) == "xoxb-after"
    found = await store.async_find_installation(enterprise_id=None, team_id="TBOT1")
    assert found is not None and found.user_id == "UINST" and found.bot_token == "xoxb-after"
