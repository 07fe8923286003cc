"""Documents built from a channel's messages: each message a dated, signed block, files named, bots left out, chunks
cut between messages; and stretches that stay runs of neighbours, within a day and the cap, whatever order they come."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from datetime import timedelta

from core.learning.documents import build_document, day_of, message_block
from core.learning.stretches import Slot, place_in_day
from tests.core.learning.paged_history import T0, msg, ts


def test_a_message_block_has_its_time_author_text_and_files_and_no_blank_line() -> None:
    message = msg(62, "first line\n\n\nsecond paragraph with https://example.com/x kept", author="Ana",
                  files=("report.pdf", "graph.png"))
    assert message_block(message) == (
        "[2026-11-03 10:02] Ana: first line\nsecond paragraph with https://example.com/x kept"
        " (file: report.pdf) (file: graph.png)"
    )


def test_a_thread_document_is_titled_by_its_day_and_first_author_and_links_to_its_first_message() -> None:
    root = msg(0, "Deploy is blocked", author="ci", by_bot=True)
    replies = [msg(1, "I'll look", author="Ana", thread=root.id), msg(2, "fixed", author="Bo", thread=root.id)]
    document = build_document(f"thread:{root.id}", [root, *replies], channel_name="incidents", fallback_uri="x")
    assert document is not None
    assert document.title == "#incidents — 2026-11-03, thread by Ana"  # the bot's root is not learned from
    assert document.uri == replies[0].permalink
    assert document.text == "[2026-11-03 09:01] Ana: I'll look\n\n[2026-11-03 09:02] Bo: fixed"
    assert build_document("thread:1", [root], channel_name="incidents", fallback_uri="x") is None


def test_a_question_to_the_bot_is_not_learned_from_its_neighbours_are() -> None:
    asked = dataclasses.replace(msg(0, "@relaybot what broke?", author="Ana"), to_bot=True)
    told = msg(1, "the disk filled up", author="Bo")
    document = build_document("stretch:x", [asked, told], channel_name="incidents", fallback_uri="x")
    assert document is not None and document.text == "[2026-11-03 09:01] Bo: the disk filled up"
    assert build_document("stretch:y", [asked], channel_name="incidents", fallback_uri="x") is None


def test_a_stretch_is_titled_by_its_day_and_falls_back_to_a_plain_address_without_a_permalink() -> None:
    message = msg(0, "hello")
    document = build_document("stretch:2026-11-03:1", [dataclasses.replace(message, permalink="")],
                              channel_name="incidents", fallback_uri="channel:slack:T1:C1/stretch:2026-11-03:1")
    assert document is not None and document.title == "#incidents — 2026-11-03"
    assert document.uri == "channel:slack:T1:C1/stretch:2026-11-03:1"


def test_chunks_end_between_messages_and_only_a_message_larger_than_a_chunk_is_cut() -> None:
    messages = [msg(i, f"message {i} " + "word " * (10 + 7 * (i % 5))) for i in range(40)]
    huge = msg(50, "Sentence about the outage number. " * 120)
    document = build_document("stretch:d:1", [*messages, huge], channel_name="c", fallback_uri="x", max_tokens=64)
    assert document is not None
    blocks = [message_block(m) for m in messages]
    cut_up = [c.text for c in document.chunks]
    # Every chunk before the huge message is whole blocks, in order.
    whole = [c for c in cut_up if not c.startswith("Sentence") and "Sentence about" not in c]
    assert "\n\n".join(whole).split("\n\n") == blocks
    assert all(chunk.token_count <= 64 + 2 for chunk in document.chunks)
    assert len(cut_up) - len(whole) > 1  # the huge one, alone, in several


def _runs(placed: dict[str, str], slots: list[Slot]) -> list[str]:
    order = sorted(slots, key=lambda s: (s.at, s.id))
    return [placed[s.id] for s in order]


def _place_one_by_one(slots: list[Slot], cap: int) -> dict[str, str]:
    placed: dict[str, str] = {}
    for slot in slots:
        existing = [Slot(at=s.at, id=s.id, document=placed[s.id]) for s in slots if s.id in placed]
        placed.update(place_in_day(existing, [slot], cap=cap))
    return placed


def test_stretches_stay_runs_of_neighbours_within_the_cap_in_any_arrival_order() -> None:
    rng = random.Random(7)
    slots = [Slot(at=T0 + timedelta(minutes=i), id=ts(i)) for i in range(60)]
    for arrival in (slots, list(reversed(slots)), rng.sample(slots, len(slots))):
        placed = _place_one_by_one(arrival, cap=5)
        runs = _runs(placed, slots)
        assert max(Counter(runs).values()) <= 5
        # A run of neighbours: once a stretch ends it never comes back.
        seen: list[str] = []
        for document in runs:
            if not seen or seen[-1] != document:
                assert document not in seen, runs
                seen.append(document)
        assert all(document.startswith(f"stretch:{day_of(T0)}:") for document in runs)


def test_a_page_of_messages_placed_at_once_is_placed_as_one_by_one() -> None:
    slots = [Slot(at=T0 + timedelta(minutes=i), id=ts(i)) for i in range(12)]
    placed = place_in_day([], slots, cap=4)
    assert max(Counter(placed.values()).values()) <= 4 and len(placed) == 12
