"""The Slack emulator's status, reactions and answer blocks against the real slack_sdk client: what Slack accepts,
what it refuses with which error, and what the thread shows after."""

from __future__ import annotations

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.emulators.slack import SlackEmulator

CHANNEL = "C0000SIGNS"


def client_for(slack: SlackEmulator) -> AsyncWebClient:
    return AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)


async def refused(call: object) -> str:
    with pytest.raises(SlackApiError) as raised:
        await call  # type: ignore[misc]
    return str(raised.value.response["error"])


async def test_a_status_shows_with_its_loading_messages_until_the_app_replies(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    client = client_for(slack)
    root = slack.add_user_message(CHANNEL, "a question", "U0000ALICE")
    await client.assistant_threads_setStatus(channel_id=CHANNEL, thread_ts=root, status="is thinking…",
                                             loading_messages=["Reading…", "Writing…"])
    shown = slack.status_shown(CHANNEL, root)
    assert shown is not None and shown.status == "is thinking…" and shown.loading_messages == ("Reading…", "Writing…")
    # Someone else's reply leaves it; the app's own reply in the thread takes it away.
    slack.add_user_message(CHANNEL, "me too", "U0000BOB", root)
    assert slack.status_shown(CHANNEL, root) is not None
    await client.chat_postMessage(channel=CHANNEL, thread_ts=root, text="the answer")
    assert slack.status_shown(CHANNEL, root) is None
    # "" clears it too.
    await client.assistant_threads_setStatus(channel_id=CHANNEL, thread_ts=root, status="is thinking…")
    await client.assistant_threads_setStatus(channel_id=CHANNEL, thread_ts=root, status="")
    assert slack.status_shown(CHANNEL, root) is None


async def test_a_status_slack_refuses_names_why(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    client = client_for(slack)
    root = slack.add_user_message(CHANNEL, "a question", "U0000ALICE")
    assert await refused(client.assistant_threads_setStatus(
        channel_id=CHANNEL, thread_ts=root, status="…", loading_messages=[f"m{i}" for i in range(11)])) == "invalid_arguments"
    assert await refused(client.assistant_threads_setStatus(
        channel_id=CHANNEL, thread_ts="1.000001", status="…")) == "invalid_thread_ts"
    slack.refuse("assistant.threads.setStatus", "missing_scope")
    assert await refused(client.assistant_threads_setStatus(channel_id=CHANNEL, thread_ts=root, status="…")) == "missing_scope"
    slack.refuse("assistant.threads.setStatus", None)
    await client.assistant_threads_setStatus(channel_id=CHANNEL, thread_ts=root, status="…")
    assert slack.status_shown(CHANNEL, root) is not None


async def test_reactions_are_added_once_and_removed_with_slacks_errors(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    client = client_for(slack)
    ts = slack.add_user_message(CHANNEL, "a question", "U0000ALICE")
    await client.reactions_add(channel=CHANNEL, timestamp=ts, name="eyes")
    assert slack.reactions_on(CHANNEL, ts) == {"eyes": [slack.bot_user_id]}
    assert slack.message_json(CHANNEL, ts)["reactions"] == [{"name": "eyes", "users": [slack.bot_user_id], "count": 1}]
    assert await refused(client.reactions_add(channel=CHANNEL, timestamp=ts, name="eyes")) == "already_reacted"
    assert await refused(client.reactions_add(channel=CHANNEL, timestamp=ts, name=":eyes:")) == "invalid_name"
    assert await refused(client.reactions_add(channel=CHANNEL, timestamp="1.000001", name="eyes")) == "message_not_found"
    await client.reactions_remove(channel=CHANNEL, timestamp=ts, name="eyes")
    assert slack.reactions_on(CHANNEL, ts) == {}
    assert await refused(client.reactions_remove(channel=CHANNEL, timestamp=ts, name="eyes")) == "no_reaction"
    slack.refuse("reactions.add", "missing_scope")
    assert await refused(client.reactions_add(channel=CHANNEL, timestamp=ts, name="eyes")) == "missing_scope"


def feedback(value: str = "up:x") -> dict[str, object]:
    button = {"text": {"type": "plain_text", "text": "👍"}, "value": value}
    return {"type": "context_actions", "elements": [{"type": "feedback_buttons", "action_id": "fb",
                                                     "positive_button": button, "negative_button": button}]}


async def test_stop_stream_blocks_go_under_the_text_and_bad_ones_are_refused(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    client = client_for(slack)
    root = slack.add_user_message("D0000SIGNS", "a question", "U0000ALICE")
    started = await client.api_call("chat.startStream", json={"channel": "D0000SIGNS", "thread_ts": root,
                                                              "markdown_text": "Hello"})
    ts = started["ts"]
    bad = {"type": "context_actions", "elements": []}
    assert await refused(client.api_call("chat.stopStream", json={"channel": "D0000SIGNS", "ts": ts,
                                                                  "blocks": [bad]})) == "invalid_blocks"
    assert await refused(client.api_call("chat.stopStream", json={"channel": "D0000SIGNS", "ts": ts,
                                                                  "blocks": [feedback()] * 51})) == "invalid_blocks"
    record = slack.message("D0000SIGNS", ts)
    assert record.stream is not None and not record.stream.stopped, "a refused stop leaves the stream going"
    await client.api_call("chat.stopStream", json={"channel": "D0000SIGNS", "ts": ts, "markdown_text": " world",
                                                   "blocks": [feedback()]})
    record = slack.message("D0000SIGNS", ts)
    assert record.text == "Hello world" and record.blocks == [feedback()] and record.stream.stopped


async def test_an_answer_message_of_a_markdown_block_and_buttons_and_its_limits(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    client = client_for(slack)
    root = slack.add_user_message(CHANNEL, "a question", "U0000ALICE")
    text = "**Hello** there"
    posted = await client.chat_postMessage(channel=CHANNEL, thread_ts=root, text=text,
                                           blocks=[{"type": "markdown", "text": text}, feedback()])
    record = slack.message(CHANNEL, posted["ts"])
    assert record.markdown and record.text == text
    too_long = "x" * 12_001
    assert await refused(client.chat_update(channel=CHANNEL, ts=posted["ts"], text="x",
                                            blocks=[{"type": "markdown", "text": too_long}])) == "invalid_blocks"
    assert await refused(client.chat_update(channel=CHANNEL, ts=posted["ts"], text="x",
                                            blocks=[{"type": "markdown"}])) == "invalid_blocks"
    assert await refused(client.chat_update(channel=CHANNEL, ts=posted["ts"], text="x",
                                            blocks=[{"type": "actions", "elements": []}])) == "invalid_blocks"
    assert await refused(client.chat_update(channel=CHANNEL, ts=posted["ts"], markdown_text=text,
                                            blocks=[{"type": "markdown", "text": text}])) == "markdown_text_conflict"
    # markdown_text replaces the message whole: its buttons go.
    await client.chat_update(channel=CHANNEL, ts=posted["ts"], markdown_text="Bye")
    record = slack.message(CHANNEL, posted["ts"])
    assert record.text == "Bye" and record.blocks is None
