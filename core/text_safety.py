"""Outside text made storable once, where it enters the engine: no NUL, no lone surrogate, questions size-capped."""

from __future__ import annotations

import json
import re
from typing import Any

# Postgres text and jsonb hold no NUL, and UTF-8 (so psycopg) cannot encode a lone UTF-16 surrogate: either in
# a question, a page or a tool result failed the run when it was stored, long after it was read.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# The same in JSON text written without ASCII escapes, where NUL is still \u0000 (a literal "\\u0000" matches too,
# and is only copied needlessly).
_UNSTORABLE_JSON = re.compile(r"\\u0000|[\ud800-\udfff]")
# Slack's own longest message, so no chat question is ever cut; an API question past it is (the prompt budget
# would cut it anyway, after counting and encoding all of it on the event loop).
QUESTION_MAX_CHARS = 40_000
_CUT = re.compile(r"\n\n\[The question was cut here: it is [\d,]+ characters long and only the first [\d,]+ are read\.\]\Z")


def storable(text: str) -> str:
    """`text` without NUL characters, each lone surrogate replaced by U+FFFD (a split pair joined back)."""
    if _UNSTORABLE.search(text) is None:
        return text
    text = text.replace("\x00", "")
    # UTF-16 is where surrogates live: a pair becomes its one character, a lone half U+FFFD.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def is_storable(text: str) -> bool:
    """Whether Postgres can take `text` as it is (a lookup by an id that is not can match nothing stored)."""
    return _UNSTORABLE.search(text) is None


def capped_question(text: str, *, max_chars: int = QUESTION_MAX_CHARS) -> str:
    """A question made storable and cut at `max_chars`, with a sentence saying so (the model reads it)."""
    text = storable(text)
    if len(text) <= max_chars or _CUT.match(text, max_chars):
        return text  # short enough, or cut already (a Request rebuilt with dataclasses.replace)
    return text[:max_chars] + question_cut(len(text), max_chars)


def question_cut(length: int, max_chars: int) -> str:
    """The sentence that ends a question cut at its cap."""
    return f"\n\n[The question was cut here: it is {length:,} characters long and only the first {max_chars:,} are read.]"


def _clean_in_c(value: Any) -> bool:
    """The common case, checked in C: nothing to clean, so nothing copied (a 50,000-value enum is a big copy).
    False also when the C encoder cannot say (too deep, or not plain JSON): the walk decides then."""
    try:
        return _UNSTORABLE_JSON.search(json.dumps(value, ensure_ascii=False)) is None
    except (RecursionError, TypeError, ValueError):
        return False


def storable_json(value: Any) -> Any:
    """A JSON value (as json.loads makes it) with every string and key made storable, the rest as it was; copied
    without recursion, since a client's schema may nest deeper than Python's stack."""
    if _clean_in_c(value):
        return value
    root = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        holder, key = stack.pop()
        item = holder[key]
        if isinstance(item, str):
            holder[key] = storable(item)
        elif isinstance(item, list):
            holder[key] = copied = list(item)
            stack.extend((copied, index) for index in range(len(copied)))
        elif isinstance(item, dict):
            holder[key] = copied = {storable(name) if isinstance(name, str) else name: inner for name, inner in item.items()}
            stack.extend((copied, name) for name in copied)
    return root[0]
