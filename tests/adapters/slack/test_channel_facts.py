"""Slack's readers' facts for the visibility rule, against the emulator: a channel's place (public, private, shared,
a DM, guests among its members — paged, each person looked up once), the channels a person shares with the bot
(users.conversations, paged), cached, and forgotten when someone joins or leaves."""

from __future__ import annotations

import asyncio

from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.budgets import ScaledClock, SlackBudgets
from adapters.slack.channel_facts import SlackChannelFacts
from adapters.slack.channel_people import SlackPeople
from adapters.slack.transport import SlackWeb
from core.learning.model import Place
from tests.emulators.slack import SlackEmulator

ALICE, BOB, GUEST = "U0000ALICE", "U0000BOB", "U0000GUEST"
INCIDENTS, SECRET, PARTNERS = "C0000INCID", "G0000SECRT", "C0000PARTN"


def facts_of(slack: SlackEmulator, *, cache_s: float = 300.0, guest_wait_s: float = 2.0) -> SlackChannelFacts:
    clock = ScaledClock(slack.time_scale)
    budgets = SlackBudgets(clock=clock, share=1.0)
    web = SlackWeb(AsyncWebClient(token=slack.bot_token, base_url=slack.api_url), budgets=budgets, clock=clock)
    return SlackChannelFacts(web, SlackPeople(web), cache_s=cache_s, guest_wait_s=guest_wait_s)


def calls(slack: SlackEmulator, method: str) -> int:
    """Calls of `method` Slack answered (a 429's retry is the same call)."""
    return sum(1 for c in slack.calls if c.method == method and c.status == 200)


async def test_a_channels_place_public_private_shared_guests_and_direct(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    slack.add_user(GUEST, guest="multi")
    slack.add_channel(INCIDENTS, name="incidents", members=[ALICE, BOB])
    slack.add_channel(SECRET, name="secret", private=True, members=[ALICE])
    slack.add_channel(PARTNERS, name="partners", members=[ALICE], shared="external")
    slack.add_channel("C0000GUEST", name="with-guest", members=[ALICE, GUEST])
    slack.add_channel("G0000GROUP", name="mpdm", mpim=True, members=[ALICE, BOB])
    slack.set_dm_user("D0000ALICE", ALICE)
    facts = facts_of(slack)
    team = slack.team_id
    assert await facts.place(team, INCIDENTS) == Place(public=True)
    assert await facts.place(team, SECRET) == Place(public=False)
    assert await facts.place(team, PARTNERS) == Place(public=True, shared=True)
    assert await facts.place(team, "C0000GUEST") == Place(public=True, has_guests=True)
    assert (await facts.place(team, "G0000GROUP")).direct
    assert await facts.place(team, "D0000ALICE") == Place(public=False, direct=True)
    # Cached: asked again, no call; each person looked up once across channels.
    before = len(slack.calls)
    assert await facts.place(team, INCIDENTS) == Place(public=True)
    assert len(slack.calls) == before
    looked_up = [c.params["user"] for c in slack.calls if c.method == "users.info"]
    assert len(looked_up) == len(set(looked_up))


async def test_guests_are_found_on_any_page_of_members() -> None:
    async with SlackEmulator(time_scale=0.001) as slack:  # 451 users.info at Tier 4 take Slack minutes
        people = [f"U{n:08d}" for n in range(450)]
        slack.add_user(GUEST, guest="single")
        slack.add_channel(INCIDENTS, name="incidents", members=[*people, GUEST])
        # The question waits for every look-up here (a long wait): the guest is found, not assumed.
        assert (await facts_of(slack, guest_wait_s=60.0).place(slack.team_id, INCIDENTS)).has_guests
        assert calls(slack, "conversations.members") == 3  # 452 members (the bot too), 200 a page
        assert calls(slack, "users.info") == 452


async def test_members_not_looked_up_yet_count_as_guests_until_they_are(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator  # a Slack minute lasts 3 s: 150 look-ups on users.info's 100 a minute outlast a question
    slack.add_channel(INCIDENTS, name="incidents", members=[f"U{n:08d}" for n in range(150)])
    facts = facts_of(slack)
    assert (await facts.place(slack.team_id, INCIDENTS)).has_guests, "unknown yet: counted as guests"
    for _ in range(100):  # bounded: the look-ups go on in the background
        if not (await facts.place(slack.team_id, INCIDENTS)).has_guests:
            break
    assert await facts.place(slack.team_id, INCIDENTS) == Place(public=True)
    assert calls(slack, "users.info") == 151  # each member once, the bot too
    await facts.close()


async def test_readable_by_is_the_channels_a_person_shares_with_the_bot_cached_until_forgotten(
    slack_emulator: SlackEmulator,
) -> None:
    slack = slack_emulator
    slack.add_channel(INCIDENTS, name="incidents", members=[ALICE])
    slack.add_channel(SECRET, name="secret", private=True, members=[ALICE])
    slack.add_channel("G0000OTHER", name="other", private=True, members=[BOB])
    for n in range(250):  # past one page of users.conversations
        slack.add_channel(f"C{n:08d}", name=f"c{n}", members=[ALICE])
    facts = facts_of(slack)
    team, asked = slack.team_id, (INCIDENTS, SECRET, "G0000OTHER", "C0000NONE")
    assert await facts.readable_by(team, ALICE, asked) == {INCIDENTS, SECRET}
    assert await facts.readable_by(team, BOB, asked) == {"G0000OTHER"}
    assert calls(slack, "users.conversations") == 3  # Alice's two pages, Bob's one
    assert await facts.readable_by(team, ALICE, asked) == {INCIDENTS, SECRET}
    assert calls(slack, "users.conversations") == 3
    # Bob joins #incidents: the event makes the facts forget him, and his next question reads his channels again.
    slack.join_channel(INCIDENTS, BOB)
    assert await facts.readable_by(team, BOB, asked) == {"G0000OTHER"}, "cached until forgotten"
    facts.forget(team, user=BOB)
    assert await facts.readable_by(team, BOB, asked) == {"G0000OTHER", INCIDENTS}
    # A guest joins: the channel's place is forgotten, and read again with them.
    slack.add_user(GUEST, guest="multi")
    assert not (await facts.place(team, INCIDENTS)).has_guests
    slack.join_channel(INCIDENTS, GUEST)
    facts.forget(team, user=GUEST, channel=INCIDENTS)
    assert (await facts.place(team, INCIDENTS)).has_guests


async def test_entries_expire_after_the_cache_time() -> None:
    async with SlackEmulator(time_scale=0.001) as slack:  # a Slack second lasts a millisecond
        slack.add_channel(INCIDENTS, name="incidents", members=[ALICE])
        slack.add_channel(PARTNERS, name="partners", members=[BOB])
        facts = facts_of(slack, cache_s=5.0)
        assert await facts.readable_by(slack.team_id, ALICE, (INCIDENTS, PARTNERS)) == {INCIDENTS}
        slack.join_channel(PARTNERS, ALICE)
        # Read again once its five Slack seconds are over (polled, bounded).
        for _ in range(400):
            if PARTNERS in await facts.readable_by(slack.team_id, ALICE, (INCIDENTS, PARTNERS)):
                break
            await asyncio.sleep(0.005)
        assert await facts.readable_by(slack.team_id, ALICE, (INCIDENTS, PARTNERS)) == {INCIDENTS, PARTNERS}
