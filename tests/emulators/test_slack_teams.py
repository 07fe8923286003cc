"""The Slack emulator's tokens: each speaks for one workspace (or an org's), and another team's channel refuses it."""

from __future__ import annotations

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.emulators.slack import SlackEmulator
from tests.fixtures.slack import slack_emulator  # noqa: F401


def client(slack: SlackEmulator, token: str) -> AsyncWebClient:
    return AsyncWebClient(token=token, base_url=slack.api_url, retry_handlers=[])


async def test_a_token_acts_in_its_own_team_and_finds_no_channel_of_another(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    slack = slack_emulator
    other = slack.add_team("T0000TEAMB")
    slack.add_channel("C0000AAAA1", name="a-general")
    slack.add_channel("C0000BBBB1", name="b-general", team_id=other.team_id)
    await client(slack, other.bot_token).chat_postMessage(channel="C0000BBBB1", text="b's own")
    with pytest.raises(SlackApiError) as raised:
        await client(slack, other.bot_token).chat_postMessage(channel="C0000AAAA1", text="into a's channel")
    assert raised.value.response["error"] == "channel_not_found"
    assert [m.text for m in slack.messages("C0000AAAA1")] == []
    calls = slack.calls_by_token(other.bot_token)
    assert [(c.method, c.team_id, c.error) for c in calls] == [
        ("chat.postMessage", "T0000TEAMB", None), ("chat.postMessage", "T0000TEAMB", "channel_not_found")]


async def test_granted_tokens_work_until_revoked(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    slack = slack_emulator
    slack.grant_token("xoxb-rotated-1", slack.team_id)
    auth = await client(slack, "xoxb-rotated-1").auth_test()
    assert auth["team_id"] == slack.team_id
    slack.revoke_token("xoxb-rotated-1")
    with pytest.raises(SlackApiError) as raised:
        await client(slack, "xoxb-rotated-1").auth_test()
    assert raised.value.response["error"] == "invalid_auth"
    assert slack.calls[-1].token == "xoxb-rotated-1" and slack.calls[-1].team_id is None


async def test_an_org_wide_token_acts_in_every_workspace_of_its_org_and_no_other(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    slack = slack_emulator
    one = slack.add_team("T0000GRID1", enterprise_id="E0000ORG01")
    two = slack.add_team("T0000GRID2", enterprise_id="E0000ORG01")
    slack.add_channel("C0000GRID1", name="one", team_id=one.team_id)
    slack.add_channel("C0000GRID2", name="two", team_id=two.team_id)
    slack.grant_token("xoxb-org-wide", None, "E0000ORG01")
    org = client(slack, "xoxb-org-wide")
    await org.chat_postMessage(channel="C0000GRID1", text="in one")
    await org.chat_postMessage(channel="C0000GRID2", text="in two")
    assert [c.team_id for c in slack.calls_by_token("xoxb-org-wide")] == [one.team_id, two.team_id]
    with pytest.raises(SlackApiError) as raised:
        await org.chat_postMessage(channel=slack.add_channel("C0000CHAN1", name="general"), text="outside the org")
    assert raised.value.response["error"] == "channel_not_found"
    assert (await org.auth_test(team_id=two.team_id))["enterprise_id"] == "E0000ORG01"


async def test_files_need_a_token_of_the_files_team(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    slack = slack_emulator
    other = slack.add_team("T0000TEAMB")
    info = slack.add_file("a.txt", b"team a's", "text/plain")
    async with aiohttp.ClientSession() as session:
        async with session.get(info["url_private_download"], headers={"Authorization": f"Bearer {other.bot_token}"}) as r:
            assert r.content_type == "text/html"  # the sign-in page, as Slack answers a wrong token
        async with session.get(info["url_private_download"], headers={"Authorization": f"Bearer {slack.bot_token}"}) as r:
            assert await r.read() == b"team a's"


async def test_another_workspaces_people_are_not_found(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    slack = slack_emulator
    other = slack.add_team("T0000TEAMB")
    slack.add_user("U0000BRUNO", team_id=other.team_id)
    assert (await client(slack, other.bot_token).users_info(user="U0000BRUNO"))["user"]["team_id"] == other.team_id
    with pytest.raises(SlackApiError) as raised:
        await client(slack, slack.bot_token).users_info(user="U0000BRUNO")
    assert raised.value.response["error"] == "user_not_found"
