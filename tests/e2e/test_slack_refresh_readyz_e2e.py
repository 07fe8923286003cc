"""A Slack workspace whose token refresh fails is shown in /readyz for that team alone (issue 25: "A refresh failure
is logged, shown in /readyz for that team, and retried"): the process stays ready for the others, and the note goes
once a refresh succeeds."""

from __future__ import annotations

from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.oauth import build_installations
from adapters.slack.team_tokens import TeamKey
from core.store.db import Database
from core.store.installations import InstallStore
from tests.e2e.test_slack_install_e2e import KEY, TEAM_A, TEAM_B, Deployment, deployment  # noqa: F401  (the fixture)
from tests.emulators.slack.oauth import DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET
from tests.support.engine import test_settings as make_settings


async def readyz(deployment: Deployment) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"{deployment.base}/readyz") as response:
        return response.status, await response.json()


async def test_a_failed_refresh_is_shown_in_readyz_for_that_team_only_and_cleared_by_a_refresh_that_works(
    deployment: Deployment, db: Database,  # noqa: F811
) -> None:
    slack = deployment.slack
    slack.oauth.rotate(expires_in=60)  # within the 5 minutes before expiry: each read of the token refreshes it
    for team in (TEAM_A, TEAM_B):
        status, page = await deployment.install(team)
        assert status == 200, page
    assert await readyz(deployment) == (200, {"status": "ready"})

    # Another process of the deployment refreshes team A's token, and Slack refuses the refresh token.
    settings = make_settings("http://127.0.0.1:9/v1", slack_client_id=DEFAULT_CLIENT_ID, secret_key=KEY,
                             slack_client_secret=DEFAULT_CLIENT_SECRET, slack_api_url=slack.api_url)
    other = build_installations(settings, InstallStore(db), AsyncWebClient(base_url=slack.api_url))
    live = dict(slack.oauth.state.refresh_tokens)
    slack.oauth.state.refresh_tokens.clear()
    await other.bot_token(TeamKey(TEAM_A))  # the old token is still used until it expires
    status, body = await readyz(deployment)
    assert status == 200 and body["status"] == "ready", body
    assert list(body["notes"]["slack"]) == [TEAM_A]
    assert body["notes"]["slack"][TEAM_A].startswith("token refresh failing (invalid_refresh_token)")

    # Tried again on the next call: once Slack takes the refresh token, the note is gone.
    slack.oauth.state.refresh_tokens.update(live)
    await other.bot_token(TeamKey(TEAM_A))
    assert await readyz(deployment) == (200, {"status": "ready"})
