"""Slack's live events as the changes the engine takes: the emulator's payloads (as Slack documents them) for new
messages, replies, edits, deletes, renames, archives, the bot's removal and members coming and going, read by the
real history door and facts against the emulator. The engine's side is a recorder of what it is handed (the port
ChannelLearning), so each change can be seen as it arrives; tests/e2e/test_slack_learning_e2e.py runs the real one."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.budgets import ScaledClock, SlackBudgets
from adapters.slack.channel_facts import SlackChannelFacts
from adapters.slack.channel_history import SlackChannelHistory
from adapters.slack.channel_people import SlackPeople
from adapters.slack.learning_events import SlackLearningEvents
from adapters.slack.reader import BotIdentity
from adapters.slack.transport import SlackWeb
from core.learning.model import ChannelChange, ChannelPlace, LearnedChannel
from tests.emulators.slack import SlackEmulator, channel_message_event

ALICE, BOB = "U0000ALICE", "U0000BOB"
INCIDENTS = "C0000INCID"


class Recorder:
    """The engine's side of the port, recording each change it is handed; `fail` makes take raise once."""

    def __init__(self) -> None:
        self.taken: list[ChannelChange] = []
        self.fail = False

    async def take(self, change: ChannelChange) -> None:
        if self.fail:
            self.fail = False
            raise RuntimeError("the database is down")
        self.taken.append(change)

    async def add(self, place: ChannelPlace, *, since_days: int | None, keep_days: int | None) -> LearnedChannel:
        raise NotImplementedError

    async def remove(self, place: ChannelPlace) -> bool:
        raise NotImplementedError

    async def get(self, place: ChannelPlace) -> LearnedChannel | None:
        return None

    def chosen(self, place: ChannelPlace) -> bool:
        return True


class Choosing(Recorder):
    """One that says, in memory, which channels anyone chose."""

    def __init__(self, chosen: set[str]) -> None:
        super().__init__()
        self._chosen = chosen

    def chosen(self, place: ChannelPlace) -> bool:
        return place.channel in self._chosen


def parts(slack: SlackEmulator, learning: Recorder) -> tuple[SlackLearningEvents, SlackChannelFacts]:
    clock = ScaledClock(slack.time_scale)
    web = SlackWeb(AsyncWebClient(token=slack.bot_token, base_url=slack.api_url),
                   budgets=SlackBudgets(clock=clock, share=1.0), clock=clock)
    people = SlackPeople(web)
    facts = SlackChannelFacts(web, people)
    return SlackLearningEvents(history=SlackChannelHistory(web, people), facts=facts, learning=learning), facts


async def until(predicate: Callable[[], bool]) -> bool:
    for _ in range(500):
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return predicate()


def deliver(events: SlackLearningEvents, slack: SlackEmulator, bot: BotIdentity, *payloads: dict[str, Any]) -> None:
    """Each payload in its envelope, to the listener Bolt would call (message events, or the channel events)."""
    for event in payloads:
        body = slack.event_envelope(event)
        if event["type"] == "message":
            events.on_message(body, event, bot)
        else:
            events.on_channel_event(body, event, bot)


async def test_messages_replies_edits_and_deletes_become_changes(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    slack.add_user(ALICE, display_name="alice.w")
    slack.add_channel(INCIDENTS, name="incidents", members=[ALICE, BOB])
    learning = Recorder()
    events, _ = parts(slack, learning)
    bot = BotIdentity(user_id=slack.bot_user_id, bot_id=slack.bot_id)
    root = slack.add_user_message(INCIDENTS, "db down", ALICE)
    reply = slack.add_user_message(INCIDENTS, "restarting", BOB, root)
    deliver(events, slack, bot,
            channel_message_event(text="db down", user=ALICE, channel=INCIDENTS, ts=root, team_id=slack.team_id),
            channel_message_event(text="restarting", user=BOB, channel=INCIDENTS, ts=reply, team_id=slack.team_id,
                                  thread_ts=root))
    assert await until(lambda: len(learning.taken) == 2)
    first, second = sorted(learning.taken, key=lambda c: c.message.id if c.message else "")
    place = ChannelPlace(platform="slack", workspace=slack.team_id, channel=INCIDENTS)
    assert first.kind == "message" and first.place == place and first.message is not None
    assert first.message.author_name == "alice.w" and first.message.text == "db down" and first.message.thread == ""
    assert second.message is not None and second.message.thread == root and second.message.id == reply
    assert second.message.permalink.endswith(f"?thread_ts={root}&cid={INCIDENTS}")
    deliver(events, slack, bot, *slack.edit_message(INCIDENTS, reply, "restarting now"))
    assert await until(lambda: len(learning.taken) == 3)
    edited = learning.taken[-1]
    assert edited.kind == "message" and edited.message is not None
    assert (edited.message.id, edited.message.text, edited.message.thread) == (reply, "restarting now", root)
    deliver(events, slack, bot, *slack.delete_message(INCIDENTS, reply))
    assert await until(lambda: len(learning.taken) == 4)
    assert learning.taken[-1] == ChannelChange(kind="deleted", place=place, message_id=reply)
    # A root with replies, deleted, may stay as a tombstone: its message_changed takes the text away too.
    deliver(events, slack, bot, {"type": "message", "subtype": "message_changed", "hidden": True, "channel": INCIDENTS,
                                 "channel_type": "channel", "ts": slack.add_user_message(INCIDENTS, "x", ALICE),
                                 "message": {"type": "message", "subtype": "tombstone", "text": "This message was deleted.",
                                             "ts": root, "thread_ts": root, "reply_count": 1, "hidden": True}})
    assert await until(lambda: len(learning.taken) == 5)
    assert learning.taken.pop() == ChannelChange(kind="deleted", place=place, message_id=root)
    # A bot's message is passed on marked (the engine leaves it out); a join notice and a DM are not passed on.
    other = slack.add_bot_message(INCIDENTS, "deploy done", bot_id="B0000OTHER", username="ci")
    deliver(events, slack, bot,
            {"type": "message", "subtype": "bot_message", "bot_id": "B0000OTHER", "username": "ci", "text": "deploy done",
             "ts": other, "channel": INCIDENTS, "channel_type": "channel"},
            {"type": "message", "subtype": "channel_join", "user": BOB, "text": "<@U0000BOB> has joined the channel",
             "ts": slack.add_user_message(INCIDENTS, "joined", BOB), "channel": INCIDENTS, "channel_type": "channel"},
            channel_message_event(text="hi", user=ALICE, channel="D0000ALICE", ts=slack.add_user_message(
                "D0000ALICE", "hi", ALICE), team_id=slack.team_id, channel_type="im"))
    assert await until(lambda: len(learning.taken) == 5)
    await asyncio.sleep(0.05)
    assert len(learning.taken) == 5 and learning.taken[-1].message is not None and learning.taken[-1].message.by_bot
    await events.close()


async def test_renames_archives_the_bots_removal_and_members(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    slack.add_channel(INCIDENTS, name="incidents", members=[ALICE])
    slack.add_channel("G0000SECRT", name="secret", private=True, members=[ALICE])
    learning = Recorder()
    events, facts = parts(slack, learning)
    bot = BotIdentity(user_id=slack.bot_user_id, bot_id=slack.bot_id)
    place = ChannelPlace(platform="slack", workspace=slack.team_id, channel=INCIDENTS)
    secret = ChannelPlace(platform="slack", workspace=slack.team_id, channel="G0000SECRT")
    slack.add_user(BOB)
    assert await facts.readable_by(slack.team_id, BOB, (INCIDENTS,)) == frozenset()
    deliver(events, slack, bot, *slack.join_channel(INCIDENTS, BOB, inviter=ALICE))
    assert await until(lambda: len(learning.taken) == 1)
    assert learning.taken[0] == ChannelChange(kind="member", place=place, user=BOB)
    # The facts forgot Bob there and then: his next question reads his channels again.
    assert await facts.readable_by(slack.team_id, BOB, (INCIDENTS,)) == {INCIDENTS}
    deliver(events, slack, bot, *slack.rename_channel(INCIDENTS, "incidents-2026"),
            *slack.rename_channel("G0000SECRT", "secret-2"), *slack.archive_channel("G0000SECRT", by=ALICE))
    assert await until(lambda: len(learning.taken) == 4)
    assert learning.taken[1:] == [ChannelChange(kind="renamed", place=place, name="incidents-2026"),
                                  ChannelChange(kind="renamed", place=secret, name="secret-2"),
                                  ChannelChange(kind="left", place=secret)]
    # The bot removed: Slack sends member_left_channel of its user and channel_left; each says "left".
    deliver(events, slack, bot, *slack.leave_channel(INCIDENTS, slack.bot_user_id, by=ALICE))
    assert await until(lambda: len(learning.taken) == 6)
    assert learning.taken[4:] == [ChannelChange(kind="left", place=place)] * 2
    deliver(events, slack, bot, *slack.delete_channel(INCIDENTS))
    assert await until(lambda: len(learning.taken) == 7) and learning.taken[-1].kind == "left"
    await events.close()


async def test_sharing_and_privacy_changes_forget_the_channels_place(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    slack.add_channel(INCIDENTS, name="incidents", members=[ALICE])
    learning = Recorder()
    events, facts = parts(slack, learning)
    bot = BotIdentity(user_id=slack.bot_user_id, bot_id=slack.bot_id)
    assert not (await facts.place(slack.team_id, INCIDENTS)).shared
    deliver(events, slack, bot, *slack.share_channel(INCIDENTS, with_team="T0000PARTN"))
    assert (await facts.place(slack.team_id, INCIDENTS)).shared
    deliver(events, slack, bot, *slack.make_channel_private(INCIDENTS, by=ALICE))
    assert not (await facts.place(slack.team_id, INCIDENTS)).public
    deliver(events, slack, bot, *slack.unshare_channel(INCIDENTS, from_team="T0000PARTN"))
    assert not (await facts.place(slack.team_id, INCIDENTS)).shared
    assert learning.taken == []


async def test_a_failing_take_is_logged_never_lost_silently_and_unchosen_channels_cost_nothing(
    slack_emulator: SlackEmulator, caplog: pytest.LogCaptureFixture,
) -> None:
    slack = slack_emulator
    learning = Choosing({INCIDENTS})
    learning.fail = True
    events, _ = parts(slack, learning)
    bot = BotIdentity(user_id=slack.bot_user_id, bot_id=slack.bot_id)
    ts = slack.add_user_message(INCIDENTS, "db down", ALICE)
    with caplog.at_level(logging.ERROR, logger="adapters.learning_feed"):
        deliver(events, slack, bot, channel_message_event(text="db down", user=ALICE, channel=INCIDENTS, ts=ts,
                                                          team_id=slack.team_id))
        assert await until(lambda: events.pending == 0)
    assert any("could not take a message of" in r.getMessage() and r.exc_info and "database is down" in str(r.exc_info[1])
               for r in caplog.records)
    # A channel nobody chose: no users.info for its author, nothing handed over.
    other = slack.add_user_message("C0000OTHER", "lunch?", BOB)
    deliver(events, slack, bot, channel_message_event(text="lunch?", user=BOB, channel="C0000OTHER", ts=other,
                                                      team_id=slack.team_id))
    await asyncio.sleep(0.05)
    assert events.pending == 0 and learning.taken == []
    assert [c.params["user"] for c in slack.calls if c.method == "users.info"] == [ALICE]
    await events.close()


async def test_changes_reach_the_engine_in_the_order_slack_sent_them(slack_emulator: SlackEmulator) -> None:
    """A message whose author's name needs a users.info call, then its delete and another's edit at once: the delete
    never overtakes it (it would be stored after its delete and stay learnt)."""
    slack = slack_emulator
    slack.add_user(ALICE, display_name="alice.w")
    learning = Recorder()
    events, _ = parts(slack, learning)
    bot = BotIdentity(user_id=slack.bot_user_id, bot_id=slack.bot_id)
    ts = slack.add_user_message(INCIDENTS, "the password is hunter2", ALICE)
    deliver(events, slack, bot,
            channel_message_event(text="the password is hunter2", user=ALICE, channel=INCIDENTS, ts=ts,
                                  team_id=slack.team_id),
            *slack.delete_message(INCIDENTS, ts))
    assert await until(lambda: len(learning.taken) == 2)
    assert [change.kind for change in learning.taken] == ["message", "deleted"]
    assert learning.taken[1].message_id == ts
    await events.close()
