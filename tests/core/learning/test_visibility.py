"""The visibility rule (issue 24) over a workspace modelled in the test: every branch, and failures fail closed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from core.learning.model import Audience, ChannelPlace, Place
from core.learning.visibility import ChannelVisibility


@dataclass
class Channel:
    members: set[str]
    public: bool = False
    shared: bool = False
    direct: bool = False


@dataclass
class Workspace:
    """A platform's teams as the facts read them: channels with members, and which members are guests."""

    channels: dict[tuple[str, str], Channel] = field(default_factory=dict)
    guests: set[str] = field(default_factory=set)


class ModelFacts:
    """ChannelFacts over a Workspace (the port the platforms implement); counts its calls, fails where told."""

    def __init__(self, world: Workspace, *, failing: Sequence[str] = (), readers_fail: bool = False,
                 hanging: Sequence[str] = (), readers_hang: bool = False) -> None:
        self.world = world
        self.failing = set(failing)
        self.readers_fail = readers_fail
        self.hanging = set(hanging)  # never answered: a platform call stuck behind its door
        self.readers_hang = readers_hang
        self.place_calls: list[str] = []
        self.readable_calls: list[tuple[str, tuple[str, ...]]] = []

    async def place(self, workspace: str, channel: str) -> Place:
        self.place_calls.append(channel)
        if channel in self.hanging:
            await asyncio.Event().wait()
        if channel in self.failing:
            raise RuntimeError(f"channel_not_found for {channel}")
        found = self.world.channels[(workspace, channel)]
        return Place(public=found.public, has_guests=bool(found.members & self.world.guests), shared=found.shared,
                     direct=found.direct)

    async def readable_by(self, workspace: str, user: str, channels: Sequence[str]) -> frozenset[str]:
        self.readable_calls.append((user, tuple(channels)))
        if self.readers_hang:
            await asyncio.Event().wait()
        if self.readers_fail:
            raise RuntimeError("ratelimited")
        return frozenset(c for c in channels if user in self.world.channels[(workspace, c)].members
                         or (self.world.channels[(workspace, c)].public and user not in self.world.guests))

    def forget(self, workspace: str, *, user: str = "", channel: str = "") -> None:
        pass


def world() -> Workspace:
    w = Workspace(guests={"G1"})
    w.channels = {
        ("T1", "GENERAL"): Channel(members={"U1", "U2", "U3"}, public=True),
        ("T1", "RANDOM"): Channel(members={"U1", "U2"}, public=True),
        ("T1", "SECRET"): Channel(members={"U1"}),
        ("T1", "WITHGUEST"): Channel(members={"U1", "G1"}, public=True),
        ("T1", "CONNECT"): Channel(members={"U1", "X9"}, public=True, shared=True),
        ("T1", "TEAMPRIV"): Channel(members={"U1", "U2"}),
        ("T1", "D1"): Channel(members={"U1"}, direct=True),
        ("T2", "OTHER"): Channel(members={"U1"}, public=True),
    }
    return w


def places(*channels: str, workspace: str = "T1", platform: str = "slack") -> list[ChannelPlace]:
    return [ChannelPlace(platform=platform, workspace=workspace, channel=c) for c in channels]


def key(channel: str, workspace: str = "T1", platform: str = "slack") -> str:
    return f"{platform}:{workspace}:{channel}"


def in_channel(channel: str, asker: str = "U1") -> Audience:
    return Audience(platform="slack", workspace="T1", channel=channel, asker=asker)


def direct(asker: str, channel: str = "D1") -> Audience:
    return Audience(platform="slack", workspace="T1", channel=channel, asker=asker, direct=True)


@pytest.fixture
def facts() -> ModelFacts:
    return ModelFacts(world())


@pytest.fixture
def rule(facts: ModelFacts) -> ChannelVisibility:
    visibility = ChannelVisibility()
    visibility.attach("slack", facts)
    return visibility


ALL = ("GENERAL", "RANDOM", "SECRET", "WITHGUEST", "CONNECT", "TEAMPRIV")


async def test_no_audience_sees_no_learned_channel(rule: ChannelVisibility, facts: ModelFacts) -> None:
    assert await rule.readable(None, places(*ALL)) == frozenset()
    assert not facts.place_calls and not facts.readable_calls


async def test_in_a_dm_the_asker_sees_the_channels_they_can_read_in_one_call(rule: ChannelVisibility, facts: ModelFacts) -> None:
    assert await rule.readable(direct("U1"), places(*ALL)) == {key(c) for c in ALL}
    assert await rule.readable(direct("U3"), places(*ALL)) == {key("GENERAL"), key("RANDOM"), key("WITHGUEST"), key("CONNECT")}
    # A guest reads only the channels they are in: a public channel is not the guest's.
    assert await rule.readable(direct("G1"), places(*ALL)) == {key("WITHGUEST")}
    assert len(facts.readable_calls) == 3 and not facts.place_calls


async def test_an_asker_outside_a_private_channel_never_sees_it_in_a_dm(rule: ChannelVisibility) -> None:
    assert key("SECRET") not in await rule.readable(direct("U2"), places(*ALL))
    assert key("TEAMPRIV") in await rule.readable(direct("U2"), places(*ALL))


async def test_a_channel_sees_its_own_passages_whoever_is_in_it(rule: ChannelVisibility, facts: ModelFacts) -> None:
    for channel in ("SECRET", "WITHGUEST", "CONNECT"):
        assert key(channel) in await rule.readable(in_channel(channel), places(channel))
    assert not facts.place_calls  # its own passages need no fact


async def test_a_channel_without_guests_sees_public_unshared_channels_never_private_ones(rule: ChannelVisibility) -> None:
    seen = await rule.readable(in_channel("RANDOM", asker="U2"), places(*ALL))
    assert seen == {key("RANDOM"), key("GENERAL"), key("WITHGUEST")}
    # A private channel whose members differ from the answer's audience, and a Slack Connect one: never.
    assert key("SECRET") not in seen and key("TEAMPRIV") not in seen and key("CONNECT") not in seen
    # Even when the asker is in the private channel: the answer's audience is the channel's members.
    assert key("SECRET") not in await rule.readable(in_channel("GENERAL", asker="U1"), places(*ALL))


async def test_a_channel_with_a_guest_sees_only_its_own(rule: ChannelVisibility) -> None:
    assert await rule.readable(in_channel("WITHGUEST"), places(*ALL)) == {key("WITHGUEST")}


async def test_a_slack_connect_channel_sees_only_its_own(rule: ChannelVisibility) -> None:
    assert await rule.readable(in_channel("CONNECT"), places(*ALL)) == {key("CONNECT")}


async def test_another_teams_channel_is_never_seen(rule: ChannelVisibility, facts: ModelFacts) -> None:
    other = places("OTHER", workspace="T2")
    assert await rule.readable(in_channel("GENERAL"), other) == frozenset()
    assert await rule.readable(direct("U1"), other) == frozenset()
    assert await rule.readable(in_channel("GENERAL"), places("GENERAL", platform="discord")) == frozenset()
    assert not facts.readable_calls and not facts.place_calls


async def test_on_discord_public_is_what_everyone_may_view_by_the_same_rule() -> None:
    guild = Workspace()
    guild.channels = {
        ("G1", "100"): Channel(members={"A", "B"}, public=True),  # @everyone views it
        ("G1", "200"): Channel(members={"A"}),  # a role's channel: @everyone denied VIEW_CHANNEL
        ("G1", "300"): Channel(members={"A", "B"}, public=True),
    }
    rule = ChannelVisibility()
    rule.attach("discord", ModelFacts(guild))
    asked = Audience(platform="discord", workspace="G1", channel="300", asker="A")
    assert await rule.readable(asked, places("100", "200", workspace="G1", platform="discord")) == {key("100", "G1", "discord")}
    in_dm = Audience(platform="discord", workspace="G1", channel="dm", asker="B", direct=True)
    assert await rule.readable(in_dm, places("100", "200", workspace="G1", platform="discord")) == {key("100", "G1", "discord")}


async def test_over_the_api_only_the_channels_granted_to_the_key(rule: ChannelVisibility, facts: ModelFacts) -> None:
    key_audience = Audience(platform="api", workspace="key:7", channel="api", asker="key:7")
    assert await rule.readable(key_audience, places(*ALL), granted=frozenset({key("RANDOM")})) == {key("RANDOM")}
    assert await rule.readable(key_audience, places(*ALL)) == frozenset()
    assert not facts.place_calls and not facts.readable_calls


async def test_a_failing_place_leaves_that_channel_out_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    facts = ModelFacts(world(), failing=["GENERAL", "WITHGUEST"])
    rule = ChannelVisibility()
    rule.attach("slack", facts)
    with caplog.at_level(logging.WARNING, logger="core.learning.visibility"):
        assert await rule.readable(in_channel("RANDOM"), places(*ALL)) == {key("RANDOM")}
    [record] = caplog.records
    assert "2 learned channel(s) left out" in record.getMessage() and "channel_not_found" in record.getMessage()


async def test_a_failing_answering_channel_keeps_only_its_own() -> None:
    rule = ChannelVisibility()
    rule.attach("slack", ModelFacts(world(), failing=["RANDOM"]))
    assert await rule.readable(in_channel("RANDOM"), places(*ALL)) == {key("RANDOM")}


async def test_a_failing_readers_call_shows_nothing_in_a_dm(caplog: pytest.LogCaptureFixture) -> None:
    rule = ChannelVisibility()
    rule.attach("slack", ModelFacts(world(), readers_fail=True))
    with caplog.at_level(logging.WARNING, logger="core.learning.visibility"):
        assert await rule.readable(direct("U1"), places(*ALL)) == frozenset()
    assert len(caplog.records) == 1 and "ratelimited" in caplog.records[0].getMessage()


async def test_a_platform_with_no_facts_attached_fails_closed() -> None:
    rule = ChannelVisibility()
    assert await rule.readable(direct("U1"), places(*ALL)) == frozenset()
    assert await rule.readable(in_channel("RANDOM"), places(*ALL)) == {key("RANDOM")}


async def test_a_dm_never_counts_as_a_channel_without_guests(rule: ChannelVisibility) -> None:
    # An audience that names a DM's channel without saying direct is asked in that DM: only its own.
    assert await rule.readable(in_channel("D1"), places(*ALL)) == frozenset()


async def test_facts_not_back_by_the_deadline_leave_their_channels_out_and_the_rest_still_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rule = ChannelVisibility(deadline_s=0.05)
    rule.attach("slack", ModelFacts(world(), hanging=["GENERAL"]))
    with caplog.at_level(logging.WARNING, logger="core.learning.visibility"):
        # GENERAL's read is stuck; WITHGUEST, asked after the deadline, answers from memory all the same.
        assert await rule.readable(in_channel("RANDOM"), places("GENERAL", "WITHGUEST", "RANDOM")) == {
            key("RANDOM"), key("WITHGUEST")}
    assert "no answer from the platform within 0.05 s" in caplog.records[0].getMessage()
    stuck = ChannelVisibility(deadline_s=0.05)
    stuck.attach("slack", ModelFacts(world(), readers_hang=True))
    assert await stuck.readable(direct("U1"), places(*ALL)) == frozenset()


async def test_a_channel_stored_as_private_is_not_asked_about_for_another_channel(
    rule: ChannelVisibility, facts: ModelFacts
) -> None:
    stored = frozenset({key("SECRET"), key("GENERAL")})  # GENERAL was private when learning began, public since
    seen = await rule.readable(in_channel("RANDOM"), places("SECRET", "GENERAL", "WITHGUEST", "RANDOM"), private=stored)
    assert seen == {key("RANDOM"), key("WITHGUEST")}
    assert "SECRET" not in facts.place_calls and "GENERAL" not in facts.place_calls
    # In the channel itself, and in a member's DM, it is there all the same.
    assert key("SECRET") in await rule.readable(in_channel("SECRET"), places("SECRET"), private=stored)
    assert key("SECRET") in await rule.readable(direct("U1"), places("SECRET"), private=stored)
