"""Which stretch a channel message outside threads joins: its neighbour's within the same UTC day, halved past the cap."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core.learning.documents import stretch_key


@dataclass(frozen=True, kw_only=True)
class Slot:
    """One message of a day outside threads: when, which, and the stretch it is in ('' for one not placed yet)."""

    at: datetime
    id: str
    document: str = ""


def place_in_day(existing: Sequence[Slot], new: Sequence[Slot], *, cap: int) -> dict[str, str]:
    """The stretch of each new message, and of each existing one a split moved: `{id: document}`.

    A new message joins the stretch of the message before it in the day (else the one after it, else starts one
    named after itself), so a stretch stays a run of neighbouring messages whatever order history arrives in
    (newest first in a backfill, oldest first live). A stretch past `cap` messages is cut in two halves, one keeping
    its name; so each holds at most `cap`, and each split moves at most half a stretch.
    """
    slots = sorted(existing, key=lambda s: (s.at, s.id))
    order = [(s.at, s.id) for s in slots]
    counts = Counter(s.document for s in slots)
    changed: dict[str, str] = {}
    for new_slot in sorted(new, key=lambda s: (s.at, s.id)):
        position = bisect.bisect_left(order, (new_slot.at, new_slot.id))
        if position < len(order) and order[position] == (new_slot.at, new_slot.id):
            continue  # already placed
        neighbour = slots[position - 1] if position > 0 else (slots[position] if position < len(slots) else None)
        document = neighbour.document if neighbour is not None else stretch_key(new_slot.at, new_slot.id)
        slots.insert(position, Slot(at=new_slot.at, id=new_slot.id, document=document))
        order.insert(position, (new_slot.at, new_slot.id))
        changed[new_slot.id] = document
        counts[document] += 1
        if counts[document] > cap:
            moved_to, moved = _split(slots, document, changed)
            counts[document] -= moved
            counts[moved_to] += moved
    return changed


def _split(slots: list[Slot], document: str, changed: dict[str, str]) -> tuple[str, int]:
    """Cut a stretch in two: the half whose first message does not already name it takes that name."""
    indexes = [i for i, s in enumerate(slots) if s.document == document]
    half = len(indexes) // 2
    first, second = indexes[:half], indexes[half:]
    taken = {s.document for s in slots}
    moving = second
    name = stretch_key(slots[second[0]].at, slots[second[0]].id)
    if name in taken:
        moving = first
        name = stretch_key(slots[first[0]].at, slots[first[0]].id)
    suffix = 1
    while name in taken:
        suffix += 1
        name = f"{stretch_key(slots[moving[0]].at, slots[moving[0]].id)}~{suffix}"
    for index in moving:
        slots[index] = Slot(at=slots[index].at, id=slots[index].id, document=name)
        changed[slots[index].id] = name
    return name, len(moving)
