"""The Slack emulator as learning from channels uses it: history and replies paging with their windows and the 1/min
tier, roots' reply_count and latest_reply, who is in which channel, guests, and the events of edits, deletes,
renames, archives and the bot's removal — each as Slack documents it."""

from __future__ import annotations

import time

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.emulators.slack import SlackEmulator

ALICE, BOB, GUEST = "U0000ALICE", "U0000BOB", "U0000GUEST"
INCIDENTS, SECRET = "C0000INCID", "G0000SECRT"


def client(slack: SlackEmulator) -> AsyncWebClient:
    return AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)


async def test_history_pages_newest_first_in_its_window_and_roots_carry_their_thread(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    slack.add_channel(INCIDENTS, name="incidents", members=[ALICE])
    day = 86_400.0
    now = time.time()
    old = slack.add_user_message(INCIDENTS, "a year ago", ALICE, at=now - 400 * day)
    root = slack.add_user_message(INCIDENTS, "db down", ALICE, at=now - 30 * day)
    first = slack.add_user_message(INCIDENTS, "restarting", BOB, root, at=now - 30 * day + 60)
    later = slack.add_user_message(INCIDENTS, "back up", ALICE, root, at=now - 29 * day)
    plain = slack.add_user_message(INCIDENTS, "lunch?", BOB, at=now - 10 * day)
    web = client(slack)
    oldest = f"{now - 90 * day:.6f}"
    page = await web.conversations_history(channel=INCIDENTS, oldest=oldest, limit=1)
    assert [m["ts"] for m in page["messages"]] == [plain] and page["has_more"]
    rest = await web.conversations_history(channel=INCIDENTS, oldest=oldest, limit=1,
                                           cursor=page["response_metadata"]["next_cursor"])
    listed = rest["messages"][0]
    assert listed["ts"] == root and listed["reply_count"] == 2 and listed["latest_reply"] == later
    assert not rest["has_more"] and rest["response_metadata"]["next_cursor"] == ""
    # The window: exclusive unless inclusive, `latest` too; the year-old message is outside 90 days.
    inclusive = await web.conversations_history(channel=INCIDENTS, oldest=root, latest=plain, inclusive=True)
    assert [m["ts"] for m in inclusive["messages"]] == [plain, root]
    everything = await web.conversations_history(channel=INCIDENTS)
    assert [m["ts"] for m in everything["messages"]] == [plain, root, old]
    replies = await web.conversations_replies(channel=INCIDENTS, ts=root, limit=2)
    assert [m["ts"] for m in replies["messages"]] == [root, first] and replies["has_more"]
    tail = await web.conversations_replies(channel=INCIDENTS, ts=root, limit=2,
                                           cursor=replies["response_metadata"]["next_cursor"])
    assert [m["ts"] for m in tail["messages"]] == [later] and tail["messages"][0]["thread_ts"] == root


async def test_the_limited_tier_gives_15_messages_a_page_and_one_call_a_minute(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    slack.limit_history("limited")
    for n in range(20):
        slack.add_user_message(INCIDENTS, f"message {n}", ALICE)
    web = client(slack)
    page = await web.conversations_history(channel=INCIDENTS, limit=200)
    assert len(page["messages"]) == 15 and page["has_more"]
    with pytest.raises(SlackApiError) as refused:
        await web.conversations_history(channel=INCIDENTS, cursor=page["response_metadata"]["next_cursor"])
    assert refused.value.response.status_code == 429 and "Retry-After" in refused.value.response.headers


async def test_history_of_a_channel_the_bot_is_not_in_is_not_in_channel(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    slack.add_channel(INCIDENTS, name="incidents")
    slack.remove_bot_from(INCIDENTS)
    web = client(slack)
    with pytest.raises(SlackApiError) as refused:
        await web.conversations_history(channel=INCIDENTS)
    assert refused.value.response["error"] == "not_in_channel"
    info = (await web.conversations_info(channel=INCIDENTS))["channel"]
    assert info["name"] == "incidents" and info["is_member"] is False and info["is_private"] is False
    # A private channel the bot is not in is not found at all.
    slack.add_channel(SECRET, name="secret", private=True, members=[ALICE])
    slack.remove_bot_from(SECRET)
    with pytest.raises(SlackApiError) as hidden:
        await web.conversations_info(channel=SECRET)
    assert hidden.value.response["error"] == "channel_not_found"


async def test_who_is_where_members_guests_and_shared_channels(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    slack.add_user(GUEST, guest="single")
    slack.add_user(BOB, display_name="Bobby")
    slack.add_channel(INCIDENTS, name="incidents", members=[ALICE, BOB, GUEST])
    slack.add_channel(SECRET, name="secret", private=True, members=[ALICE])
    slack.add_channel("C0000SHARD", name="partners", members=[ALICE], shared="external")
    slack.add_channel("G0000GROUP", name="mpdm-alice--bob", mpim=True, members=[ALICE, BOB])
    web = client(slack)
    first = await web.conversations_members(channel=INCIDENTS, limit=2)
    rest = await web.conversations_members(channel=INCIDENTS, limit=2, cursor=first["response_metadata"]["next_cursor"])
    assert sorted(first["members"] + rest["members"]) == sorted([ALICE, BOB, GUEST, slack.bot_user_id])
    guest = (await web.users_info(user=GUEST))["user"]
    assert guest["is_restricted"] and guest["is_ultra_restricted"]
    bob = (await web.users_info(user=BOB))["user"]
    assert not bob["is_restricted"] and bob["profile"]["display_name"] == "Bobby"
    shared = (await web.conversations_info(channel="C0000SHARD"))["channel"]
    assert shared["is_ext_shared"] and shared["is_shared"]
    group = (await web.conversations_info(channel="G0000GROUP"))["channel"]
    assert group["is_mpim"] and group["is_private"]
    secret = (await web.conversations_info(channel=SECRET))["channel"]
    assert secret["is_private"] and secret["name"] == "secret"
    types = "public_channel,private_channel"
    alices = await web.users_conversations(user=ALICE, types=types)
    assert {c["id"] for c in alices["channels"]} == {INCIDENTS, SECRET, "C0000SHARD"}
    bobs = await web.users_conversations(user=BOB, types=types, limit=1)
    assert [c["id"] for c in bobs["channels"]] == [INCIDENTS] and not bobs["response_metadata"]["next_cursor"]
    # The bot left the private channel: users.conversations no longer lists it for anyone.
    slack.leave_channel(SECRET, slack.bot_user_id)
    assert {c["id"] for c in (await web.users_conversations(user=ALICE, types=types))["channels"]} == {
        INCIDENTS, "C0000SHARD"}


async def test_edits_deletes_and_channel_changes_come_as_slacks_events(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    slack.add_channel(INCIDENTS, name="incidents", members=[ALICE])
    root = slack.add_user_message(INCIDENTS, "db down", ALICE)
    reply = slack.add_user_message(INCIDENTS, "restarting", ALICE, root)
    [changed] = slack.edit_message(INCIDENTS, reply, "restarting now")
    assert changed["subtype"] == "message_changed" and changed["channel"] == INCIDENTS
    assert changed["message"]["ts"] == reply and changed["message"]["text"] == "restarting now"
    assert changed["message"]["thread_ts"] == root and changed["message"]["edited"]["ts"] == changed["ts"]
    assert changed["previous_message"]["text"] == "restarting"
    [deleted] = slack.delete_message(INCIDENTS, reply)
    assert deleted["subtype"] == "message_deleted" and deleted["deleted_ts"] == reply
    assert deleted["previous_message"]["text"] == "restarting now"
    history = await client(slack).conversations_history(channel=INCIDENTS)
    assert "reply_count" not in history["messages"][0]
    [renamed] = slack.rename_channel(INCIDENTS, "incidents-2026")
    assert renamed == {"type": "channel_rename", "channel": renamed["channel"], "event_ts": renamed["event_ts"]}
    assert renamed["channel"]["id"] == INCIDENTS and renamed["channel"]["name"] == "incidents-2026"
    assert (await client(slack).conversations_info(channel=INCIDENTS))["channel"]["name"] == "incidents-2026"
    [archived] = slack.archive_channel(INCIDENTS, by=ALICE)
    assert archived["type"] == "channel_archive" and archived["user"] == ALICE
    [joined] = slack.join_channel(INCIDENTS, BOB, inviter=ALICE)
    assert joined["type"] == "member_joined_channel" and joined["user"] == BOB and joined["channel_type"] == "C"
    left, own = slack.leave_channel(INCIDENTS, slack.bot_user_id, by=ALICE)
    assert left["type"] == "member_left_channel" and left["user"] == slack.bot_user_id
    assert own == {"type": "channel_left", "channel": INCIDENTS, "actor_id": ALICE, "event_ts": own["event_ts"]}
    with pytest.raises(SlackApiError) as refused:
        await client(slack).conversations_history(channel=INCIDENTS)
    assert refused.value.response["error"] == "not_in_channel"
    slack.add_channel(SECRET, name="secret", private=True, members=[ALICE])
    assert slack.rename_channel(SECRET, "secret-2")[0]["type"] == "group_rename"
    assert slack.delete_channel(SECRET)[0]["type"] == "group_deleted"
    [shared] = slack.share_channel("C0000OTHER", with_team="T0000PARTN")
    assert shared["type"] == "channel_shared" and shared["connected_team_id"] == "T0000PARTN"
    [private] = slack.make_channel_private("C0000OTHER", by=ALICE)
    assert private["subtype"] == "channel_convert_to_private" and private["channel_type"] == "group"


async def test_permalinks_are_slacks_documented_form(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    ts = slack.add_user_message(INCIDENTS, "db down", ALICE)
    web = client(slack)
    link = (await web.chat_getPermalink(channel=INCIDENTS, message_ts=ts))["permalink"]
    url = (await web.auth_test())["url"]
    assert link == f"{url}archives/{INCIDENTS}/p{ts.replace('.', '')}"
