"""The Slack emulator's OAuth v2 as Slack answers it: the consent page back to the redirect URL, oauth.v2.access
(a code once, rotation with single-use refresh tokens, org-wide installs), auth.revoke, and the uninstall envelopes."""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.emulators.slack import SlackEmulator
from tests.emulators.slack.oauth import DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET

BACK = "https://bot.example/slack/oauth_redirect"


async def _consent(slack: SlackEmulator, *, client_id: str = DEFAULT_CLIENT_ID, state: str = "s1") -> tuple[int, str]:
    query = urlencode({"client_id": client_id, "scope": "chat:write,commands", "state": state, "redirect_uri": BACK})
    async with aiohttp.ClientSession() as browser:
        async with browser.get(f"{slack.base_url}oauth/v2/authorize?{query}", allow_redirects=False) as response:
            return response.status, response.headers.get("Location", "")


def _code(location: str) -> str:
    return parse_qs(urlsplit(location).query)["code"][0]


async def _exchange(client: AsyncWebClient, **arguments: str) -> dict:
    response = await client.oauth_v2_access(client_id=DEFAULT_CLIENT_ID, client_secret=DEFAULT_CLIENT_SECRET,
                                            **arguments)
    return dict(response.data)  # type: ignore[arg-type]


async def test_a_consent_is_exchanged_once_for_a_token_of_that_team(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    slack.add_team("T0000OAUTH")
    slack.oauth.consent_as("T0000OAUTH", user_id="U0000ADMIN")
    status, location = await _consent(slack)
    assert status == 302 and location.startswith(f"{BACK}?") and parse_qs(urlsplit(location).query)["state"] == ["s1"]
    client = AsyncWebClient(base_url=slack.api_url)
    answer = await _exchange(client, code=_code(location), redirect_uri=BACK)
    assert answer["team"] == {"id": "T0000OAUTH", "name": "T0000OAUTH"} and answer["authed_user"]["id"] == "U0000ADMIN"
    assert answer["scope"] == "chat:write,commands" and not answer["is_enterprise_install"]
    assert "refresh_token" not in answer
    whoami = await client.auth_test(token=answer["access_token"])
    assert whoami["team_id"] == "T0000OAUTH"
    assert slack.oauth.tokens_of("T0000OAUTH") == [answer["access_token"]]
    with pytest.raises(SlackApiError) as used:
        await _exchange(client, code=_code(location), redirect_uri=BACK)
    assert used.value.response["error"] == "invalid_code"
    with pytest.raises(SlackApiError) as wrong:
        await client.oauth_v2_access(client_id=DEFAULT_CLIENT_ID, client_secret="wrong", code="x")
    assert wrong.value.response["error"] == "bad_client_secret"


async def test_an_unknown_client_or_a_cancelled_consent_gets_no_code(slack_emulator: SlackEmulator) -> None:
    status, _ = await _consent(slack_emulator, client_id="9999.9999")
    assert status == 400
    slack_emulator.oauth.consent_as(slack_emulator.team_id, deny=True)
    status, location = await _consent(slack_emulator)
    assert status == 302 and parse_qs(urlsplit(location).query) == {"error": ["access_denied"], "state": ["s1"]}


async def test_rotation_refreshes_once_per_refresh_token(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    slack.oauth.rotate(expires_in=43200)
    slack.oauth.consent_as(slack.team_id)
    client = AsyncWebClient(base_url=slack.api_url)
    first = await _exchange(client, code=_code((await _consent(slack))[1]))
    assert first["expires_in"] == 43200 and first["refresh_token"].startswith("xoxe-1-")
    assert first["access_token"].startswith("xoxe.xoxb-1-")
    second = await _exchange(client, grant_type="refresh_token", refresh_token=first["refresh_token"])
    assert second["access_token"] != first["access_token"] and second["refresh_token"] != first["refresh_token"]
    assert (await client.auth_test(token=second["access_token"]))["team_id"] == slack.team_id
    with pytest.raises(SlackApiError) as reused:
        await _exchange(client, grant_type="refresh_token", refresh_token=first["refresh_token"])
    assert reused.value.response["error"] == "invalid_refresh_token"
    assert slack.oauth.state.refused_refreshes == 1


async def test_an_org_wide_install_speaks_for_every_workspace_of_its_org(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    for team in ("T0000ORGA", "T0000ORGB"):
        slack.add_team(team, enterprise_id="E0000ORG")
    slack.oauth.consent_as(None, enterprise_id="E0000ORG", org_wide=True)
    client = AsyncWebClient(base_url=slack.api_url)
    answer = await _exchange(client, code=_code((await _consent(slack))[1]))
    assert answer["is_enterprise_install"] and answer["team"] is None and answer["enterprise"]["id"] == "E0000ORG"
    token = answer["access_token"]
    for team in ("T0000ORGA", "T0000ORGB"):
        assert (await client.auth_test(token=token, team_id=team))["team_id"] == team
    assert slack.oauth.tokens_of(None, enterprise_id="E0000ORG") == [token]


async def test_revoked_and_uninstalled_tokens_are_refused(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    client = AsyncWebClient(base_url=slack.api_url)
    slack.oauth.consent_as(slack.team_id)
    token = (await _exchange(client, code=_code((await _consent(slack))[1])))["access_token"]
    assert (await client.auth_revoke(token=token))["revoked"] is True
    with pytest.raises(SlackApiError) as refused:
        await client.auth_test(token=token)
    assert refused.value.response["error"] == "invalid_auth"
    slack.oauth.consent_as(slack.team_id)
    again = (await _exchange(client, code=_code((await _consent(slack))[1])))["access_token"]
    envelope = slack.oauth.uninstall(slack.team_id)
    assert envelope["event"]["type"] == "app_uninstalled" and envelope["team_id"] == slack.team_id
    for gone in (again, slack.bot_token):
        with pytest.raises(SlackApiError):
            await client.auth_test(token=gone)
    revoked = slack.oauth.tokens_revoked(slack.team_id, users=("U0000ADMIN",))
    assert revoked["event"]["tokens"]["oauth"] == ["U0000ADMIN"]
