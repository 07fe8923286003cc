"""Slack's history door for learning from a channel, against the emulator with the real slack_sdk client: paged on
the read budget as Slack pages (the limited tier's 15 a page, one call a minute), messages mapped with their
threads, authors' display names (one users.info per person), bots, files and permalinks; and the channels it
refuses, each with a sentence the admin can act on."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.budgets import ScaledClock, SlackBudgets
from adapters.slack.channel_history import SlackChannelHistory, link
from adapters.slack.channel_people import SlackPeople
from adapters.slack.transport import SlackWeb
from core.learning.model import ChannelMessage, LearningRefused
from tests.emulators.slack import SlackEmulator

ALICE, BOB = "U0000ALICE", "U0000BOB"
INCIDENTS = "C0000INCID"
DAY = 86_400.0


def door(slack: SlackEmulator, *, tier: str = "internal") -> SlackChannelHistory:
    clock = ScaledClock(slack.time_scale)
    budgets = SlackBudgets(clock=clock, share=1.0, history_tier=tier)  # type: ignore[arg-type]
    web = SlackWeb(AsyncWebClient(token=slack.bot_token, base_url=slack.api_url), budgets=budgets, clock=clock)
    return SlackChannelHistory(web, SlackPeople(web))


async def read_all(history: SlackChannelHistory, team: str, channel: str, *, since_days: float) -> list[ChannelMessage]:
    oldest = datetime.now(timezone.utc) - timedelta(days=since_days)
    found: list[ChannelMessage] = []
    cursor = ""
    while True:
        page = await history.history(team, channel, oldest=oldest, cursor=cursor)
        found += page.messages
        cursor = page.next_cursor
        if not cursor:
            return found


async def test_history_maps_roots_threads_bots_files_and_names_newest_first(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    slack.add_user(ALICE, display_name="alice.w")
    slack.add_user(BOB, real_name="Bob", display_name="")  # no display name: the real name is shown
    slack.add_channel(INCIDENTS, name="incidents", members=[ALICE, BOB])
    now = time.time()
    slack.add_user_message(INCIDENTS, "too old", ALICE, at=now - 100 * DAY)
    root = slack.add_user_message(INCIDENTS, "db down", ALICE, at=now - 30 * DAY)
    slack.add_user_message(INCIDENTS, "restarting", BOB, root, at=now - 30 * DAY + 60)
    latest = slack.add_user_message(INCIDENTS, "back", ALICE, root, at=now - 30 * DAY + 120)
    report = slack.add_file("report.pdf", b"%PDF", "application/pdf")
    shared = slack.add_user_message(INCIDENTS, "the report", BOB, files=[report], at=now - 20 * DAY)
    other_app = slack.add_bot_message(INCIDENTS, "deploy done", bot_id="B0000OTHER", username="ci", at=now - 10 * DAY)
    history = door(slack)
    read = await read_all(history, slack.team_id, INCIDENTS, since_days=90)
    assert [m.id for m in read] == [other_app, shared, root]
    ci, files, thread = read
    assert ci.by_bot and ci.author_name == "ci"
    assert files.files == ("report.pdf",) and files.author_name == "Bob" and files.thread == "" and not files.by_bot
    assert thread.thread == root and thread.reply_count == 2 and thread.latest_reply == latest
    assert thread.author_name == "alice.w" and thread.author_id == ALICE
    assert thread.at == datetime.fromtimestamp(float(root), tz=timezone.utc)
    assert thread.permalink == f"https://{slack.team().domain}.slack.com/archives/{INCIDENTS}/p{root.replace('.', '')}"
    replies = await history.replies(slack.team_id, INCIDENTS, root, cursor="")
    assert [m.text for m in replies.messages] == ["db down", "restarting", "back"]
    assert all(m.thread == root for m in replies.messages)
    reply = replies.messages[1]
    assert reply.permalink == link(f"https://{slack.team().domain}.slack.com/", INCIDENTS, reply.id, root)
    assert reply.permalink.endswith(f"?thread_ts={root}&cid={INCIDENTS}")
    # The documented form is what chat.getPermalink answers; one auth.test made it, no chat.getPermalink was asked.
    asked = await AsyncWebClient(token=slack.bot_token, base_url=slack.api_url).chat_getPermalink(
        channel=INCIDENTS, message_ts=root)
    assert asked["permalink"] == thread.permalink
    assert await history.permalink(slack.team_id, INCIDENTS, thread) == thread.permalink
    assert slack.call_names().count("chat.getPermalink") == 1 and slack.call_names().count("auth.test") == 1
    # Each person was looked up once, however many of their messages were read.
    assert sorted(c.params["user"] for c in slack.calls if c.method == "users.info") == [ALICE, BOB]
    assert (await history.threads(slack.team_id, INCIDENTS, oldest=datetime.now(timezone.utc), cursor="")).messages == ()


async def test_this_bots_own_answers_and_system_messages_are_marked_or_left_out(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    question = slack.add_user_message(INCIDENTS, "what broke?", ALICE)
    web = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    await web.chat_postMessage(channel=INCIDENTS, thread_ts=question, text="the database")
    read = await door(slack).replies(slack.team_id, INCIDENTS, question, cursor="")
    assert [(m.text, m.by_bot) for m in read.messages] == [("what broke?", False), ("the database", True)]


async def test_a_question_to_the_bot_is_marked_never_learned_and_a_mention_of_someone_else_is_not(
    slack_emulator: SlackEmulator,
) -> None:
    slack = slack_emulator
    slack.add_user_message(INCIDENTS, f"<@{slack.bot_user_id}> what broke last night?", ALICE)
    slack.add_user_message(INCIDENTS, f"<@{ALICE}> the disk filled up", BOB)
    page = await door(slack).history(slack.team_id, INCIDENTS, oldest=datetime.now(timezone.utc) - timedelta(days=1),
                                     cursor="")
    assert [(m.to_bot, m.never_learned) for m in page.messages] == [(False, False), (True, True)]  # newest first


async def test_the_limited_tier_pages_15_at_a_time_one_call_a_minute_without_a_429() -> None:
    # A Slack minute lasts 0.3 s here: the budget's pacing is what is checked, not the clock.
    async with SlackEmulator(time_scale=0.005) as slack:
        slack.limit_history("limited")
        for n in range(40):
            slack.add_user_message(INCIDENTS, f"message {n}", ALICE)
        history = door(slack, tier="limited")
        read = await read_all(history, slack.team_id, INCIDENTS, since_days=1)
        assert [m.text for m in read] == [f"message {n}" for n in reversed(range(40))]
        pages = [c for c in slack.calls if c.method == "conversations.history"]
        assert len(pages) == 3 and all(c.params["limit"] == "15" for c in pages)
        assert slack.count_429.get("conversations.history", 0) == 0


async def test_a_429_is_waited_out_and_the_page_read_again(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    slack.add_user_message(INCIDENTS, "hello", ALICE)
    slack.fail_next("conversations.history", retry_after_s=1)
    read = await read_all(door(slack), slack.team_id, INCIDENTS, since_days=1)
    assert [m.text for m in read] == ["hello"] and slack.count_429["conversations.history"] == 1


async def test_channels_it_cannot_learn_from_are_refused_with_what_to_do(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    history = door(slack)
    slack.add_channel(INCIDENTS, name="incidents", members=[ALICE])
    info = await history.info(slack.team_id, INCIDENTS)
    assert info.name == "incidents" and not info.private and not info.direct
    slack.add_channel("G0000SECRT", name="secret", private=True, members=[ALICE])
    assert (await history.info(slack.team_id, "G0000SECRT")).private
    slack.remove_bot_from(INCIDENTS)
    with pytest.raises(LearningRefused) as outside:
        await history.info(slack.team_id, INCIDENTS)
    assert "invite @relaybot to #incidents first (`/invite @relaybot`" in outside.value.sentence
    with pytest.raises(LearningRefused) as unreadable:
        await read_all(history, slack.team_id, INCIDENTS, since_days=1)
    assert "/invite @relaybot" in unreadable.value.sentence
    slack.remove_bot_from("G0000SECRT")  # a private channel the bot is not in: Slack says channel_not_found
    with pytest.raises(LearningRefused) as hidden:
        await history.info(slack.team_id, "G0000SECRT")
    assert "/invite @relaybot" in hidden.value.sentence
    slack.set_dm_user("D0000ALICE", ALICE)
    slack.add_channel("G0000GROUP", name="mpdm-alice--bob-1", mpim=True, members=[ALICE, BOB])
    for direct in ("D0000ALICE", "G0000GROUP"):
        with pytest.raises(LearningRefused) as refused:
            await history.info(slack.team_id, direct)
        assert "never learned from" in refused.value.sentence
