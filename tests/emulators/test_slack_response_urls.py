"""The Slack emulator's response_urls as Slack limits them (5 posts within 30 minutes, replace_original of a command's
ephemeral reply, seen by one person only), conversations.open, and reads refused where the bot is not a member."""

from __future__ import annotations

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from tests.emulators.slack import SlackEmulator

CHANNEL = "C0000RURLS"
ALICE = "U0000ALICE"
BOB = "U0000BOB"


async def test_a_commands_reply_is_replaced_in_place_and_only_its_asker_sees_it(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    url = slack.slash_command("/ask", "private: hi", user=ALICE, channel=CHANNEL)["response_url"]
    hook = AsyncWebhookClient(url)
    assert (await hook.send_dict({"text": "thinking…", "response_type": "ephemeral"})).status_code == 200
    assert (await hook.send_dict({"text": "the answer", "response_type": "ephemeral", "replace_original": True})).status_code == 200
    [shown] = slack.ephemerals_for(ALICE)
    assert shown.text == "the answer" and shown.replaced == 1 and shown.channel == CHANNEL
    assert slack.ephemerals_for(BOB) == [] and slack.messages(CHANNEL) == []
    assert slack.response_url_uses(url) == 2
    assert (await hook.send_dict({"delete_original": True})).status_code == 200
    assert slack.ephemerals_for(ALICE) == []


async def test_a_response_url_takes_five_posts_then_says_used_url(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    url = slack.slash_command("/ask", "x", user=ALICE, channel=CHANNEL)["response_url"]
    other = slack.slash_command("/ask", "y", user=ALICE, channel=CHANNEL)["response_url"]
    hook = AsyncWebhookClient(url)
    for n in range(5):
        assert (await hook.send_dict({"text": f"post {n}"})).status_code == 200
    refused = await hook.send_dict({"text": "one more"})
    assert refused.status_code == 404 and refused.body == "used_url"
    # Each command has a URL of its own: another one still has its five.
    assert (await AsyncWebhookClient(other).send_dict({"text": "fine"})).status_code == 200
    slack.spend_response_url(other, left=1)
    assert (await AsyncWebhookClient(other).send_dict({"text": "last"})).status_code == 200
    assert (await AsyncWebhookClient(other).send_dict({"text": "too many"})).status_code == 404


async def test_a_response_url_past_its_thirty_minutes_says_expired_url(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    root = slack.add_user_message(CHANNEL, "a message", ALICE)
    url = slack.message_shortcut(CHANNEL, root, user=ALICE, callback_id="any")["response_url"]
    slack.expire_response_url(url)
    refused = await AsyncWebhookClient(url).send_dict({"text": "late"})
    assert refused.status_code == 404 and refused.body == "expired_url"
    assert slack.ephemerals == []


async def test_conversations_open_gives_the_bots_dm_with_a_person(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    opened = await client.conversations_open(users=ALICE)
    dm = opened["channel"]["id"]
    assert dm.startswith("D") and (await client.conversations_open(users=ALICE))["channel"]["id"] == dm
    await client.chat_postMessage(channel=dm, text="hello")
    assert [m.text for m in slack.messages(dm)] == ["hello"]
    assert (await client.conversations_info(channel=dm))["channel"]["user"] == ALICE


async def test_a_bot_cannot_read_a_conversation_it_is_not_in(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    root = slack.add_user_message(CHANNEL, "a message", ALICE)
    slack.remove_bot_from(CHANNEL)
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    for read in (lambda: client.conversations_replies(channel=CHANNEL, ts=root),
                 lambda: client.conversations_history(channel=CHANNEL)):
        with pytest.raises(SlackApiError) as refused:
            await read()
        assert refused.value.response["error"] == "not_in_channel"
