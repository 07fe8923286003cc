"""Randomised (fixed seed, bounded): over random channels, members, guests, Slack Connect and audiences, a learned
channel's passage comes back from the real retriever only if every person who will see the answer can read it."""

from __future__ import annotations

import random
from dataclasses import dataclass

from core.learning.visibility import ChannelVisibility
from core.retrieval.search import PgRetriever
from core.store.db import Database
from tests.core.learning.test_visibility import Channel, ModelFacts, Workspace
from tests.core.retrieval.test_learned_channel_search import add_learned, conversation, found, scope_for

SEED = 24
WORLDS = 3
AUDIENCES_PER_WORLD = 30
TEAMS = {"T1": ("U1", "U2", "U3", "U4", "U5"), "T2": ("V1", "V2", "V3")}
GUESTS = {"T1": ("G1", "G2"), "T2": ("H1",)}
EXTERNALS = ("X1", "X2")
CHANNELS_PER_TEAM = {"T1": 8, "T2": 4}


@dataclass(frozen=True)
class Asked:
    workspace: str
    channel: str
    asker: str
    direct: bool


def random_world(rng: random.Random) -> Workspace:
    world = Workspace(guests={g for guests in GUESTS.values() for g in guests})
    for team, users in TEAMS.items():
        for n in range(CHANNELS_PER_TEAM[team]):
            members = set(rng.sample(users, rng.randint(1, len(users))))
            if rng.random() < 0.3:
                members.add(rng.choice(GUESTS[team]))
            shared = rng.random() < 0.25
            if shared:
                members.add(rng.choice(EXTERNALS))
            world.channels[(team, f"C{n}")] = Channel(members=members, public=rng.random() < 0.5, shared=shared)
        world.channels[(team, "DM")] = Channel(members=set(users), direct=True)
    return world


def can_read(world: Workspace, person: str, workspace: str, channel: str) -> bool:
    """The brute force: a member reads a channel; a full member of its team reads it too when it is public."""
    found_channel = world.channels[(workspace, channel)]
    return person in found_channel.members or (found_channel.public and person in TEAMS[workspace])


def allowed(world: Workspace, asked: Asked, workspace: str, channel: str) -> bool:
    """Whether every person who will see the answer can read the channel (the asker alone in a DM)."""
    if workspace != asked.workspace:
        return False
    audience = {asked.asker} if asked.direct else world.channels[(asked.workspace, asked.channel)].members
    return all(can_read(world, person, workspace, channel) for person in audience)


def random_audience(rng: random.Random, world: Workspace) -> Asked:
    team = rng.choice(sorted(TEAMS))
    if rng.random() < 0.35:
        return Asked(team, "DM", rng.choice(TEAMS[team] + GUESTS[team]), True)
    channel = f"C{rng.randrange(CHANNELS_PER_TEAM[team])}"
    return Asked(team, channel, rng.choice(sorted(world.channels[(team, channel)].members)), False)


async def test_a_passage_is_returned_only_where_every_member_of_the_audience_can_read_its_channel(db: Database) -> None:
    rng = random.Random(SEED)
    returned = denied = 0
    for _ in range(WORLDS):
        async with db.connection() as conn:
            await conn.execute("DELETE FROM sources")
        world = random_world(rng)
        for team in TEAMS:
            for n in range(CHANNELS_PER_TEAM[team]):
                # What was stored when learning began: mostly what it is now, sometimes stale either way.
                private = not world.channels[(team, f"C{n}")].public
                await add_learned(db, f"C{n}", workspace=team, private=private if rng.random() < 0.8 else not private)
        visibility = ChannelVisibility()
        visibility.attach("slack", ModelFacts(world))
        retriever = PgRetriever(db, None, visibility=visibility)
        for _ in range(AUDIENCES_PER_WORLD):
            asked = random_audience(rng, world)
            scope = scope_for(conversation(asked.channel, direct=asked.direct, workspace=asked.workspace), asked.asker)
            names = await found(retriever, scope)
            got = {tuple(name.split(":")[2:]) for name in names}
            everything = [(team, f"C{n}") for team in TEAMS for n in range(CHANNELS_PER_TEAM[team])]
            permitted = {place for place in everything if allowed(world, asked, *place)}
            assert got <= permitted, (asked, got - permitted)
            if asked.direct:
                assert got == permitted, asked  # the asker's readers' list is the whole truth there
            else:
                assert (asked.workspace, asked.channel) in got  # a channel always sees its own
            assert await retriever.has_sources("prefetch", scope=scope) == bool(got)
            returned += len(got)
            denied += len(everything) - len(got)
    assert returned > 50 and denied > 50  # neither side of the rule went untested
