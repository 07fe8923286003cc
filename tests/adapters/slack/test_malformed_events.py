"""A Slack event whose fields are not what Slack sends is dropped (logged, counted), never handed on."""

from __future__ import annotations

import pytest

from adapters.slack.inbound import _not_from_a_person
from tests.support.observe import sample

GOOD = {"type": "message", "user": "U1", "channel": "C1", "ts": "1700000000.000100", "text": "hi"}


def test_a_well_formed_question_is_from_a_person() -> None:
    assert not _not_from_a_person(dict(GOOD))


@pytest.mark.parametrize(
    "change",
    [
        {"channel": {"id": "C1"}},
        {"channel": ""},
        {"ts": 1700000000.0001},
        {"user": ["U1"]},
        {"text": {"rich": "text"}},
        {"thread_ts": 17},
        {"files": "not a list"},
    ],
)
def test_an_event_with_wrong_field_types_is_dropped_and_counted(change: dict) -> None:
    before = sample("relaybot_malformed_events_total", platform="slack")
    assert _not_from_a_person({**GOOD, **change})
    assert sample("relaybot_malformed_events_total", platform="slack") == before + 1
