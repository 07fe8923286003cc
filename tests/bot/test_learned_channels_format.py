"""How `relaybot sources add-channel | remove-channel` read a channel and days, and how `relaybot sources` shows each
learned channel's state: `backfilling 42% (ETA 3m)`, `live`, `error: <reason>`."""

from __future__ import annotations

import argparse

import pytest

from bot.channel_sources_cli import (format_eta, format_learned, learning_state, place_words, since_days,
                                     whole_days)
from bot.channels_cli import UsageError
from core.learning.model import ChannelPlace, LearnedChannel
from core.retrieval.store import SourceRow

PLACE = ChannelPlace(platform="slack", workspace="T1", channel="C1")


def learned(**fields: object) -> LearnedChannel:
    return LearnedChannel(**{"place": PLACE, "name": "incidents", "private": False, "since_days": 90, **fields})


def test_a_channel_is_named_as_the_channels_cli_names_one_or_as_its_workspace_then_the_channel() -> None:
    assert place_words(["slack:T1:#incidents"]) == ("slack", "T1", "#incidents")
    assert place_words(["slack:T1", "#incidents"]) == ("slack", "T1", "#incidents")
    assert place_words(["discord:G1:123"]) == ("discord", "G1", "123")
    for wrong in (["slack", "#incidents"], ["slack:T1"], ["teams:T1:C1"], ["slack:T1", "#a", "#b"],
                  ["slack:T1:C1", "C2"]):
        with pytest.raises(UsageError, match="is not a channel"):
            place_words(wrong)


def test_days_are_whole_and_since_reads_at_least_one() -> None:
    assert whole_days("90d") == 90 and whole_days("12w") == 84 and whole_days("0") == 0
    assert since_days("30d") == 30
    for wrong in ("36h", "90", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            whole_days(wrong)
    with pytest.raises(argparse.ArgumentTypeError, match="reads nothing"):
        since_days("0")


def test_each_state_reads_as_a_person_would_say_it() -> None:
    assert learning_state(learned(state="live")) == "live"
    assert learning_state(learned(done=420, total=1000, eta_s=170.2)) == "backfilling 42% (ETA 3m)"
    assert learning_state(learned(done=999, total=1000)) == "backfilling 99%"
    assert learning_state(learned(done=1000, total=1000)) == "backfilling 99%"  # its replies may still be read
    assert learning_state(learned(done=40)) == "backfilling (40 messages read)"
    assert learning_state(learned()) == "backfilling"
    assert learning_state(learned(state="error", error="Slack refused conversations.history (not_in_channel)")) == (
        "error: Slack refused conversations.history (not_in_channel)")


def test_an_eta_is_rounded_up() -> None:
    assert [format_eta(s) for s in (0, 44.2, 60, 61, 3599, 3600, 3660, 86400, 90000)] == [
        "0s", "45s", "1m", "2m", "1h", "1h", "1h 1m", "1d", "1d 1h"]


def test_the_table_names_each_channel_with_its_documents_and_state() -> None:
    private = learned(place=ChannelPlace(platform="discord", workspace="G1", channel="55"), name="ops",
                      private=True, keep_days=365, state="live")
    row = SourceRow(id=1, name="channel:slack:T1:C1", kind="channel", uri="", exposure="prefetch",
                    sync_interval_s=None, last_synced_at=None, documents=3, chunks=7)
    lines = format_learned([learned(done=1, total=4), private], [row]).splitlines()
    assert lines[0] == "Channels learned from:"
    assert lines[1].split() == ["CHANNEL", "NAME", "SINCE", "KEEP", "DOCUMENTS", "CHUNKS", "STATE"]
    assert lines[2].split() == ["slack:T1:C1", "#incidents", "90d", "forever", "3", "7", "backfilling", "25%"]
    assert lines[3].split() == ["discord:G1:55", "#ops", "(private)", "90d", "365d", "0", "0", "live"]
