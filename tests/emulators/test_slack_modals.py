"""The Slack emulator's modals: views.open takes a slash command's trigger once, within 3 s, and refuses what Slack
refuses; a view_submission carries the entered values in Slack's state shape."""

from __future__ import annotations

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.emulators.slack import SlackEmulator

MODAL = {
    "type": "modal", "callback_id": "cb", "title": {"type": "plain_text", "text": "Settings"},
    "submit": {"type": "plain_text", "text": "Save"}, "private_metadata": "{}",
    "blocks": [
        {"type": "input", "block_id": "kind", "label": {"type": "plain_text", "text": "Kind"},
         "element": {"type": "static_select", "action_id": "value",
                     "options": [{"text": {"type": "plain_text", "text": t}, "value": t} for t in ("a", "b")],
                     "initial_option": {"text": {"type": "plain_text", "text": "a"}, "value": "a"}}},
        {"type": "input", "block_id": "name", "optional": True, "label": {"type": "plain_text", "text": "Name"},
         "element": {"type": "plain_text_input", "action_id": "value", "initial_value": "x"}},
        {"type": "input", "block_id": "flag", "optional": True, "label": {"type": "plain_text", "text": "Flag"},
         "element": {"type": "checkboxes", "action_id": "value",
                     "options": [{"text": {"type": "plain_text", "text": "yes"}, "value": "yes"}]}},
    ],
}


async def test_views_open_and_submission(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    with pytest.raises(SlackApiError, match="invalid_trigger_id"):
        await client.views_open(trigger_id="made.up", view=MODAL)
    trigger = slack.slash_command("/relaybot", "", user="U0000ALICE", channel="C0000MODAL")["trigger_id"]
    with pytest.raises(SlackApiError, match="invalid_arguments"):
        await client.views_open(trigger_id=trigger, view={**MODAL, "title": {"type": "plain_text", "text": "x" * 25}})
    with pytest.raises(SlackApiError, match="invalid_arguments"):
        await client.views_open(trigger_id=trigger, view={**MODAL, "submit": None})
    opened = await client.views_open(trigger_id=trigger, view=MODAL)
    with pytest.raises(SlackApiError, match="expired_trigger_id"):
        await client.views_open(trigger_id=trigger, view=MODAL)  # a trigger opens one view
    [view] = slack.opened_views
    assert opened["view"]["id"] == view.view_id and view.user_id == "U0000ALICE"

    payload = slack.view_submission(view.view_id, {"kind": "b", "flag": True, "name": None})
    assert payload["type"] == "view_submission" and payload["user"]["id"] == "U0000ALICE"
    values = payload["view"]["state"]["values"]
    assert values["kind"]["value"]["selected_option"]["value"] == "b"
    assert values["name"]["value"] == {"type": "plain_text_input", "value": None}
    assert [o["value"] for o in values["flag"]["value"]["selected_options"]] == ["yes"]
    untouched = slack.view_submission(view.view_id)["view"]["state"]["values"]
    assert untouched["kind"]["value"]["selected_option"]["value"] == "a" and untouched["name"]["value"]["value"] == "x"
    with pytest.raises(ValueError):
        slack.view_submission(view.view_id, {"kind": "c"})


async def test_users_info_says_who_is_an_admin(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    slack.add_user("U0000BOB")
    slack.make_admin("U0000ALICE", owner=True)
    alice = (await client.users_info(user="U0000ALICE"))["user"]
    bob = (await client.users_info(user="U0000BOB"))["user"]
    assert alice["is_owner"] and not alice["is_admin"] and not bob["is_admin"] and not bob["is_owner"]


FEEDBACK = [{
    "type": "context_actions", "block_id": "fb",
    "elements": [{
        "type": "feedback_buttons", "action_id": "vote",
        "positive_button": {"text": {"type": "plain_text", "text": "👍"}, "value": "up", "accessibility_label": "Good"},
        "negative_button": {"text": {"type": "plain_text", "text": "👎"}, "value": "down"},
    }],
}]


async def test_feedback_buttons_are_checked_and_a_click_sends_the_button_value_and_a_trigger(
    slack_emulator: SlackEmulator,
) -> None:
    slack = slack_emulator
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    channel = "C0000FEEDB"
    bad = [{**FEEDBACK[0], "elements": [{**FEEDBACK[0]["elements"][0], "negative_button": None}]}]
    with pytest.raises(SlackApiError, match="invalid_blocks"):
        await client.chat_postMessage(channel=channel, text="x", blocks=bad)
    with pytest.raises(SlackApiError, match="invalid_blocks"):
        await client.chat_postMessage(channel=channel, text="x", blocks=[{**FEEDBACK[0], "elements": [{"type": "button"}]}])
    posted = await client.chat_postMessage(channel=channel, text="Was this helpful?", blocks=FEEDBACK)

    payload = slack.feedback_click(channel, posted["ts"], user="U0000ALICE", positive=False)
    [action] = payload["actions"]
    assert (action["type"], action["action_id"], action["value"], action["block_id"]) == ("feedback_buttons", "vote", "down", "fb")
    assert action["text"]["text"] == "👎"
    # Any block_actions' trigger may open one modal, as a command's may.
    await client.views_open(trigger_id=payload["trigger_id"], view=MODAL)
    assert [v.user_id for v in slack.opened_views] == ["U0000ALICE"]
