"""What `/relaybot config learn` says of a learned channel's state: reading its history (how far, how long left),
live, or the error's sentence."""

from __future__ import annotations

from adapters.discord.admin import learning_state
from core.learning.model import ChannelPlace, LearnedChannel

PLACE = ChannelPlace(platform="discord", workspace="1", channel="2")


def test_each_state_reads_as_a_sentence() -> None:
    def state(**fields: object) -> str:
        return learning_state(LearnedChannel(place=PLACE, name="incidents", private=False, since_days=90, **fields))  # type: ignore[arg-type]

    assert state(done=120, total=480, eta_s=170.0) == "reading its history, 25% (120 of 480 messages, about 3 min left)."
    assert state(done=7) == "reading its history (7 messages so far)."
    assert state(state="live", done=480, total=480) == "live (480 messages read)."
    assert state(state="error", error="The bot cannot view <#2>.") == "error: The bot cannot view <#2>."
