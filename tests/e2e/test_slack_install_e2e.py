"""Add to Slack end to end (issue 25): the real bot process's HTTP server, Bolt's own OAuth flow over the Postgres
stores, the emulator's consent page and oauth.v2.access; refused states and teams, uninstall and reinstall."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from adapters.http.server import HttpServer
from adapters.slack.installations import Sealer, SlackInstallations
from adapters.slack.oauth import FAILURES, REFUSED
from adapters.slack.platform import SLACK
from adapters.slack.team_tokens import NotInstalled, TeamKey
from core.store.db import Database
from core.store.installations import InstallStore
from core.store.team_data import Forgotten, forget_team
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator, app_mention_event
from tests.emulators.slack.oauth import DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET
from tests.e2e.slack_harness import eventually
from tests.support.engine import make_engine
from tests.support.ports import ports_for
from tests.support.processes import free_port

KEY = "the e2e test's secret key that is long enough to seal"
TEAM_A, TEAM_B, OUTSIDER = "TAAAA0001", "TBBBB0002", "TZZZZ0009"
ORG, ORG_TEAM = "EORG00001", "TORG00003"


@dataclass(kw_only=True)
class Deployment:
    slack: SlackEmulator
    http: HttpServer
    adapter: Any
    installs: SlackInstallations  # the same rows, read as another process would
    browser: aiohttp.ClientSession

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.http.port}"

    async def install(self, team_id: str | None, **consent: Any) -> tuple[int, str]:
        """A person opens /slack/install, clicks Add to Slack, approves, and is sent back: (status, page)."""
        status, page, redirect, cookie = await self.consent(team_id, **consent)
        assert status == 302, page
        return await self.come_back(redirect, cookie)

    async def consent(self, team_id: str | None, **consent: Any) -> tuple[int, str, str, str]:
        async with self.browser.get(f"{self.base}/slack/install") as response:
            assert response.status == 200
            page = await response.text()
            cookie = response.headers.get("Set-Cookie", "").split(";", 1)[0]
        assert "Add to Slack" in page and cookie.startswith("slack-app-oauth-state=")
        authorize = html.unescape(re.search(r'<a href="([^"]+)"', page)[1])  # type: ignore[index]
        assert authorize.startswith(self.slack.base_url) and "scope=" in authorize and "chat:write" in authorize
        self.slack.oauth.consent_as(team_id, **consent)
        async with self.browser.get(authorize, allow_redirects=False) as response:
            return response.status, await response.text(), response.headers.get("Location", ""), cookie

    async def come_back(self, redirect: str, cookie: str) -> tuple[int, str]:
        assert redirect.startswith(f"{self.base}/slack/oauth_redirect?")
        async with self.browser.get(redirect, headers={"Cookie": cookie}, allow_redirects=False) as response:
            return response.status, await response.text()


@pytest.fixture
async def deployment(db: Database, openai_emulator: OpenAIEmulator) -> AsyncIterator[Deployment]:
    async with db.connection() as conn:  # the module's database: each test starts with nothing installed
        for table in ("slack_bots", "slack_installers", "slack_oauth_states"):
            await conn.execute(f"DELETE FROM {table}")
    async with SlackEmulator(limits=False) as slack:
        for team in (TEAM_A, TEAM_B, OUTSIDER):
            slack.add_team(team)
        slack.add_team(ORG_TEAM, enterprise_id=ORG)
        # The emulator's preset tokens are not what this deployment may use: only what the installs issue.
        for team in (TEAM_A, TEAM_B, OUTSIDER, ORG_TEAM):
            slack.revoke_token(slack.team(team).bot_token)
        port = free_port()
        engine = make_engine(
            db, openai_emulator.base_url, slack_client_id=DEFAULT_CLIENT_ID, slack_client_secret=DEFAULT_CLIENT_SECRET,
            slack_redirect_uri=f"http://127.0.0.1:{port}/slack/oauth_redirect", slack_signing_secret=slack.signing_secret,
            slack_api_url=slack.api_url, slack_team_ids=f"{TEAM_A},{TEAM_B},{ORG}", secret_key=KEY, http_port=port,
            slack_native_streaming="off", slack_assistant=False,
        )
        http = HttpServer(host="127.0.0.1", port=port)
        adapter = SLACK.adapter(settings=engine.settings, engine=engine, ports=ports_for(db), http=http)
        await http.start()
        await adapter.start()
        # Read as another process would, with no cache of its own.
        installs = SlackInstallations(InstallStore(db), sealer=Sealer(KEY), client_id=DEFAULT_CLIENT_ID, token_cache_s=0)
        async with aiohttp.ClientSession() as browser:
            yield Deployment(slack=slack, http=http, adapter=adapter, installs=installs, browser=browser)
        await adapter.stop_accepting()
        await adapter.close()
        await http.stop()


async def _eventually_gone(deployment: Deployment, team: TeamKey) -> bool:
    for _ in range(500):
        try:
            await deployment.installs.bot_token(team)
        except NotInstalled:
            return True
        await asyncio.sleep(0.02)
    return False


def _sentence(page: str) -> str:
    return html.unescape(re.search(r"<p>(.*?)</p>", page)[1])  # type: ignore[index]


async def test_two_workspaces_install_through_the_page_and_each_is_answered_with_its_own_token(
    deployment: Deployment, openai_emulator: OpenAIEmulator,
) -> None:
    slack = deployment.slack
    for team in (TEAM_A, TEAM_B):
        status, page = await deployment.install(team, user_id=f"U{team}")
        assert status == 200, page
        assert _sentence(page).startswith(f"relaybot is installed in {team}")
    token_a, token_b = slack.oauth.tokens_of(TEAM_A), slack.oauth.tokens_of(TEAM_B)
    assert len(token_a) == len(token_b) == 1
    assert await deployment.installs.bot_token(TeamKey(TEAM_A)) == token_a[0]
    assert await deployment.installs.bot_token(TeamKey(TEAM_B)) == token_b[0]
    installer = await deployment.installs.async_find_installation(enterprise_id=None, team_id=TEAM_B)
    assert installer is not None and installer.user_id == f"U{TEAM_B}"
    assert "chat:write" in (installer.bot_scopes or [])

    # An event of each team is answered with that team's token, never the other's.
    for team, token in ((TEAM_A, token_a[0]), (TEAM_B, token_b[0])):
        openai_emulator.script(Text(f"hello {team}"))
        channel = f"C{team[1:]}"
        text = f"<@{slack.team(team).bot_user_id}> hi"
        ts = slack.add_user_message(channel, text, "U0000ALICE", team_id=team)
        event = app_mention_event(text=text, user="U0000ALICE", channel=channel, ts=ts, team_id=team)
        delivery = await slack.deliver_event(f"{deployment.base}/slack/events", event, team_id=team)
        assert delivery.status == 200
        assert await eventually(lambda: any(m.text == f"hello {team}" for m in slack.messages(channel) if m.is_bot))
        posts = [c for c in slack.calls if c.method.startswith("chat.") and c.params.get("channel") == channel]
        assert posts and {c.token for c in posts} == {token}


async def test_a_replayed_or_expired_state_is_refused_with_a_sentence(deployment: Deployment, db: Database) -> None:
    status, page, redirect, cookie = await deployment.consent(TEAM_A)
    assert (await deployment.come_back(redirect, cookie))[0] == 200
    status, page = await deployment.come_back(redirect, cookie)
    assert status == 401 and _sentence(page) == FAILURES["invalid_state"]

    status, page, redirect, cookie = await deployment.consent(TEAM_B)
    async with db.connection() as conn:
        await conn.execute("UPDATE slack_oauth_states SET expires_at = now() - interval '1 second'")
    status, page = await deployment.come_back(redirect, cookie)
    assert status == 401 and _sentence(page) == FAILURES["invalid_state"]
    with pytest.raises(NotInstalled):
        await deployment.installs.bot_token(TeamKey(TEAM_B))
    # Without the cookie of the browser that started it, even a fresh state is refused.
    status, page, redirect, cookie = await deployment.consent(TEAM_B)
    status, page = await deployment.come_back(redirect, "slack-app-oauth-state=someone-else")
    assert status == 400 and _sentence(page) == FAILURES["invalid_browser"]


async def test_an_install_from_a_team_outside_slack_team_ids_is_refused_and_its_token_revoked(
    deployment: Deployment,
) -> None:
    slack = deployment.slack
    status, page = await deployment.install(OUTSIDER)
    assert status == 403 and _sentence(page) == REFUSED
    issued = [token for token, grant in slack.oauth.state.tokens.items() if grant.team_id == OUTSIDER]
    assert len(issued) == 1 and issued[0] in slack.oauth.state.revoked
    assert slack.oauth.tokens_of(OUTSIDER) == []
    with pytest.raises(NotInstalled):
        await deployment.installs.bot_token(TeamKey(OUTSIDER))
    assert await deployment.installs.async_find_installation(enterprise_id=None, team_id=OUTSIDER) is None


async def test_an_org_wide_install_answers_for_its_workspaces(deployment: Deployment) -> None:
    status, page = await deployment.install(None, enterprise_id=ORG, org_wide=True)
    assert status == 200, page
    [token] = deployment.slack.oauth.tokens_of(None, enterprise_id=ORG)
    assert await deployment.installs.bot_token(TeamKey(ORG_TEAM, ORG)) == token
    with pytest.raises(NotInstalled):
        await deployment.installs.bot_token(TeamKey(ORG_TEAM))


async def test_uninstall_deletes_the_teams_tokens_at_once_leaves_the_other_and_a_reinstall_works(
    deployment: Deployment, db: Database,
) -> None:
    slack = deployment.slack
    forgotten: list[Forgotten] = []

    async def forget(platform: str, workspace: str, *, purge: bool) -> Forgotten:
        forgotten.append(await forget_team(db, platform, workspace, purge=purge))
        return forgotten[-1]

    deployment.adapter.uninstalls.forget = forget  # the port, recording what it forgot
    for team in (TEAM_A, TEAM_B):
        assert (await deployment.install(team))[0] == 200
    token_b = await deployment.installs.bot_token(TeamKey(TEAM_B))
    delivery = await slack.deliver_envelope(f"{deployment.base}/slack/events", slack.oauth.uninstall(TEAM_A))
    assert delivery.status == 200
    # Bolt runs the listener after the ack.
    assert await _eventually_gone(deployment, TeamKey(TEAM_A))
    with pytest.raises(NotInstalled):
        await deployment.installs.bot_token(TeamKey(TEAM_A))
    assert await deployment.installs.async_find_installation(enterprise_id=None, team_id=TEAM_A) is None
    assert await deployment.installs.bot_token(TeamKey(TEAM_B)) == token_b
    # A's pending work is dropped and its data kept (UNINSTALL_DATA=keep); B's is untouched.
    assert await eventually(lambda: len(forgotten) == 1)
    assert [(f.team, f.purged) for f in forgotten] == [(f"slack:{TEAM_A}", False)]

    # tokens_revoked for B's bot removes B's token too.
    delivery = await slack.deliver_envelope(f"{deployment.base}/slack/events", slack.oauth.tokens_revoked(TEAM_B))
    assert delivery.status == 200
    assert await _eventually_gone(deployment, TeamKey(TEAM_B))
    with pytest.raises(NotInstalled):
        await deployment.installs.bot_token(TeamKey(TEAM_B))

    assert (await deployment.install(TEAM_A))[0] == 200
    [again] = slack.oauth.tokens_of(TEAM_A)
    assert await deployment.installs.bot_token(TeamKey(TEAM_A)) == again


async def test_the_direct_link_goes_straight_to_slacks_consent_page(deployment: Deployment) -> None:
    async with deployment.browser.get(f"{deployment.base}/slack/install?direct=1", allow_redirects=False) as response:
        assert response.status == 302
        authorize = response.headers["Location"]
        cookie = response.headers.get("Set-Cookie", "").split(";", 1)[0]
    assert authorize.startswith(f"{deployment.slack.base_url}oauth/v2/authorize?") and cookie
    deployment.slack.oauth.consent_as(TEAM_A)
    async with deployment.browser.get(authorize, allow_redirects=False) as response:
        redirect = response.headers["Location"]
    status, page = await deployment.come_back(redirect, cookie)
    assert status == 200 and _sentence(page).startswith(f"relaybot is installed in {TEAM_A}")


async def test_doctor_says_where_the_install_page_is_and_who_may_install() -> None:
    from tests.support.engine import test_settings

    base = {"slack_client_id": DEFAULT_CLIENT_ID, "slack_client_secret": DEFAULT_CLIENT_SECRET,
            "slack_signing_secret": "x", "slack_redirect_uri": "https://bot.example/slack/oauth_redirect"}
    line = await SLACK.doctor(test_settings("http://127.0.0.1:9/v1", **base, secret_key=KEY))
    assert line.startswith("ok — several workspaces: Add to Slack at /slack/install")
    assert "anyone who finds the page (SLACK_TEAM_IDS is unset)" in line
    line = await SLACK.doctor(test_settings("http://127.0.0.1:9/v1", **base))
    assert line == "FAILED — several workspaces (SLACK_CLIENT_ID), but SECRET_KEY is not set (the stored tokens are " \
                   "encrypted with it)"
