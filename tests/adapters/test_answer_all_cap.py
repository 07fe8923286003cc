"""RESPOND_ALL_PER_MINUTE's cap (adapters/gate.py): answers per channel in any minute, then one sentence, then marks."""

from __future__ import annotations

from adapters.gate import AnswerAllCap, over_cap_sentence


def test_the_cap_answers_per_minute_per_channel_then_tells_once_then_marks() -> None:
    now = [0.0]
    cap = AnswerAllCap(per_minute=2, clock=lambda: now[0])
    assert [cap.take("T1:C1") for _ in range(5)] == ["answer", "answer", "tell", "mark", "mark"]
    assert cap.take("T1:C2") == "answer"  # each channel has its own minute
    now[0] = 30.0
    assert cap.take("T1:C1") == "mark"
    now[0] = 60.0  # the first two answers are a minute old: room again, and the sentence may be said again later
    assert [cap.take("T1:C1") for _ in range(4)] == ["answer", "answer", "tell", "mark"]
    assert "at most 2 messages a minute" in over_cap_sentence(2) and "one message a minute" in over_cap_sentence(1)
