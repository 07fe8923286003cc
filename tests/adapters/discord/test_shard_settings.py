"""DISCORD_SHARD_COUNT / DISCORD_SHARD_IDS read into a shard plan, and what a wrong value is told."""

from __future__ import annotations

import re

import pytest

from adapters.discord.settings import DiscordSettings
from adapters.discord.shards import ShardKeeper, ShardPlan, parse_shard_ids, shard_plan


def _plan(**env: str) -> ShardPlan:
    return shard_plan(DiscordSettings(_env_file=None, token="t", **env))  # type: ignore[arg-type]


def test_ids_and_ranges_are_read_below_the_count() -> None:
    assert parse_shard_ids(("0-2", "7", "1"), 8) == (0, 1, 2, 7)
    assert _plan() == ShardPlan()
    assert _plan(shard_count="4") == ShardPlan(count=4, fixed=None), "no ids: claimed by lease"
    assert _plan(shard_count="4", shard_ids="3, 0-1") == ShardPlan(count=4, fixed=(0, 1, 3))


@pytest.mark.parametrize("env, told", [
    ({"shard_ids": "0"}, "DISCORD_SHARD_IDS needs DISCORD_SHARD_COUNT"),
    ({"shard_count": "2", "shard_ids": "2"}, "'2' is outside 0 to 1 (DISCORD_SHARD_COUNT is 2)"),
    ({"shard_count": "2", "shard_ids": "one"}, "'one' is not a shard id or a range like 0-3"),
    ({"shard_count": "4", "shard_ids": "3-1"}, "'3-1' is outside 0 to 3"),
])
def test_a_wrong_shard_setting_is_told_in_a_sentence(env: dict[str, str], told: str) -> None:
    with pytest.raises(ValueError, match=re.escape(told)):
        _plan(**env)


async def test_without_leases_a_process_runs_the_named_shards_or_every_one() -> None:
    assert await ShardKeeper(ShardPlan(count=3)).at_start("bot") == (0, 1, 2)
    keeper = ShardKeeper(ShardPlan(count=3, fixed=(1,)))
    assert await keeper.at_start("bot") == (1,)
    assert await keeper.on_beat() is None and not keeper.standing_by
