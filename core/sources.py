"""Collects the sources of one run: deduplicated by (source, title, text), numbered in order."""

from __future__ import annotations

from typing import Iterable

from core.events import SourceItem

SNIPPET_CHARS = 1200


class SourceCollector:
    """Prefetched documents first, then what internal_search finds; numbers are citation numbers."""

    def __init__(self, items: Iterable[SourceItem] = ()) -> None:
        self._items: list[SourceItem] = []
        self._index: dict[tuple[str, str, str], int] = {}
        self.add(items)

    def add(self, items: Iterable[SourceItem]) -> list[int]:
        """Add items, returning each one's citation number (an existing number for a duplicate)."""
        numbers = []
        for item in items:
            key = (item.source, item.title, item.text)
            if key not in self._index:
                self._items.append(item)
                self._index[key] = len(self._items)
            numbers.append(self._index[key])
        return numbers

    @property
    def items(self) -> list[SourceItem]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)


def render_numbered(
    items: Iterable[SourceItem], numbers: Iterable[int], *, max_chars: int | None = SNIPPET_CHARS
) -> str:
    """Numbered passages the model can cite as [n]; each text cut at max_chars (None: whole)."""
    blocks = []
    for number, item in zip(numbers, items):
        location = f" ({item.uri})" if item.uri else ""
        blocks.append(f"[{number}] {item.title}{location}\n{item.text[:max_chars]}")
    return "\n\n".join(blocks)
