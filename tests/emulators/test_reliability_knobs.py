"""The emulators' knobs the reliability suite drives: a random share of replies lost after the work, a Slack incident."""

from __future__ import annotations

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.emulators.discord import DiscordEmulator
from tests.emulators.slack import SlackEmulator


async def test_slack_random_lost_replies_do_the_work_then_drop_the_connection() -> None:
    async with SlackEmulator() as slack:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url, retry_handlers=[])
        slack.lose_replies_randomly(1.0, methods=["chat.postMessage"], seed=1)
        with pytest.raises(aiohttp.ClientError):
            await client.chat_postMessage(channel="C0000001", text="done but unseen")
        assert [m.text for m in slack.messages("C0000001")] == ["done but unseen"]
        # Other methods are not touched, and a share of 0 turns it off.
        await client.chat_update(channel="C0000001", ts=slack.messages("C0000001")[0].ts, text="edited")
        slack.lose_replies_randomly(0)
        await client.chat_postMessage(channel="C0000001", text="seen")
        assert slack.random_lost_reply_count == 0
        assert [m.text for m in slack.messages("C0000001")] == ["edited", "seen"]


async def test_slack_incident_fails_every_method_until_it_ends() -> None:
    async with SlackEmulator() as slack:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url, retry_handlers=[])
        incident = slack.start_incident(share_503=0.5, retry_after_s=(2, 4), seed=3)
        statuses = []
        for _ in range(20):
            with pytest.raises(SlackApiError) as raised:
                await client.chat_postMessage(channel="C0000001", text="x")
            statuses.append(raised.value.response.status_code)
            if raised.value.response.status_code == 429:
                assert 2 <= int(raised.value.response.headers["retry-after"]) <= 4
        assert set(statuses) == {429, 503} and incident.count_503 + incident.count_429 == 20
        assert slack.messages("C0000001") == []
        slack.end_incident()
        await client.chat_postMessage(channel="C0000001", text="after")
        assert [m.text for m in slack.messages("C0000001")] == ["after"]


async def test_discord_random_after_work_faults_create_the_message_then_drop() -> None:
    async with DiscordEmulator() as dc:
        channel_id = dc.add_channel(dc.add_guild("g"), "general")
        url = f"{dc.api_base}/channels/{channel_id}/messages"
        dc.fail_after_work_randomly(1.0, routes=["message_create"], seed=2)
        async with aiohttp.ClientSession(headers={"Authorization": f"Bot {dc.token}"}) as http:
            with pytest.raises(aiohttp.ClientError):
                async with http.post(url, json={"content": "done but unseen"}) as response:
                    await response.read()
            dc.fail_after_work_randomly(0, routes=[])
            async with http.post(url, json={"content": "seen"}) as response:
                assert response.status == 200
        assert [m.content for m in dc.messages(channel_id)] == ["done but unseen", "seen"]
        assert dc.after_work_faults == 1
