"""The /relaybot modal's "Learn from this channel" as Slack would take it (within its limits, the state shown when
opened), and its submission read back."""

from __future__ import annotations

from datetime import datetime, timezone

from adapters.slack.admin import modal
from adapters.slack.learning_modal import LEARN_BLOCK, SINCE_BLOCK, LearningWish, read_learning, state_line
from core.channel_admin import ChannelView
from core.channels import ChannelSettings, resolve
from core.learning.model import ChannelPlace, LearnedChannel
from core.requests import ConversationKey
from tests.emulators.slack.modals import check_modal
from tests.support.engine import test_settings as make_settings

KEY = ConversationKey(platform="slack", workspace="T1", channel="C1")
PLACE = ChannelPlace(platform="slack", workspace="T1", channel="C1")


def view() -> ChannelView:
    config = resolve(KEY, channel=ChannelSettings(), workspace=None, settings=make_settings("http://127.0.0.1:9/v1"))
    return ChannelView(scope="slack:T1:C1", own=ChannelSettings(), config=config, source_names=())


def blocks_of(built: dict) -> dict[str, dict]:
    return {b["block_id"]: b for b in built["blocks"] if "block_id" in b}


def test_the_modal_offers_learning_only_where_the_bot_can_learn() -> None:
    assert LEARN_BLOCK not in blocks_of(modal(view(), team="T1", channel="C1"))
    off = modal(view(), team="T1", channel="C1", learning=True)
    assert check_modal(off) is None
    learn, since = blocks_of(off)[LEARN_BLOCK], blocks_of(off)[SINCE_BLOCK]
    assert "initial_options" not in learn["element"]
    assert [o["value"] for o in since["element"]["options"]] == ["30", "90", "365"]
    assert since["element"]["initial_option"]["value"] == "90"
    assert "Not learned from" in off["blocks"][-1]["elements"][0]["text"]


def test_the_modal_shows_the_channels_learning_when_opened() -> None:
    learned = LearnedChannel(place=PLACE, name="incidents", private=False, since_days=180, state="backfilling",
                             done=400, total=1000, eta_s=90.0, added_at=datetime.now(timezone.utc))
    built = modal(view(), team="T1", channel="C1", learning=True, learned=learned)
    assert check_modal(built) is None
    blocks = blocks_of(built)
    assert blocks[LEARN_BLOCK]["element"]["initial_options"][0]["value"] == "on"
    assert blocks[SINCE_BLOCK]["element"]["initial_option"]["value"] == "180"  # its own, offered beside the usual
    assert built["blocks"][-1]["elements"][0]["text"] == "Reading its history: 400 messages (40%), about 2 min left."
    live = LearnedChannel(place=PLACE, name="incidents", private=False, since_days=90, state="live", done=1200)
    assert state_line(live) == "Learned from: 1200 messages of the last 90 days, kept current."
    failed = LearnedChannel(place=PLACE, name="incidents", private=False, since_days=90, state="error",
                            error="invite @relaybot to #incidents first")
    assert state_line(failed) == "Learning stopped: invite @relaybot to #incidents first"


def test_a_submission_says_on_or_off_and_how_far_back() -> None:
    on = {LEARN_BLOCK: {"value": {"type": "checkboxes", "selected_options": [{"value": "on"}]}},
          SINCE_BLOCK: {"value": {"type": "static_select", "selected_option": {"value": "365"}}}}
    assert read_learning(on) == LearningWish(on=True, since_days=365)
    off = {LEARN_BLOCK: {"value": {"type": "checkboxes", "selected_options": []}},
           SINCE_BLOCK: {"value": {"type": "static_select", "selected_option": {"value": "30"}}}}
    assert read_learning(off) == LearningWish(on=False, since_days=30)
    assert read_learning({}) is None  # a modal that showed no learning
