"""The CLI's names: one NameBook over the platform table; `#channel` in a scope and `@person` in a value made ids, ids labelled in output."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from adapters.platform import Platform
from bot.platforms import PLATFORMS
from core.config import Settings
from core.names import AmbiguousName, NameBook, NameNotFound, NamesUnreadable, is_name

# What a name may fail with: each is one sentence for the user, and the command exits 2 (nothing was changed).
NAME_ERRORS = (NameNotFound, AmbiguousName, NamesUnreadable)
# Channel settings whose values are people: `approvers=@alex,U123`.
PEOPLE_FIELDS = frozenset({"approvers"})


def name_book(settings: Settings, platforms: Sequence[Platform] = PLATFORMS) -> NameBook:
    """Each platform's directory, opened only if a name is read on it."""
    return NameBook({p.name: partial(p.names, settings) for p in platforms if p.names is not None})


async def channel_id(book: NameBook, platform: str, workspace: str, channel: str | None) -> str | None:
    """The scope's channel as an id (`#help` looked up; an id as it is)."""
    if channel is None:
        return None
    return await book.resolve(platform, workspace, "channel", channel)


async def people_in_changes(book: NameBook, platform: str, workspace: str, changes: Sequence[str]) -> list[str]:
    """FIELD=VALUE words with each `@name` of a people field (approvers) made its id; other words as they are."""
    out = []
    for word in changes:
        field, sep, value = word.partition("=")
        if sep and field.strip() in PEOPLE_FIELDS and any(is_name(v, "user") for v in value.split(",")):
            ids = [await book.resolve(platform, workspace, "user", v) for v in value.split(",") if v.strip()]
            word = f"{field}={','.join(ids)}"
        out.append(word)
    return out


async def labelled_scope(book: NameBook, scope: str) -> str:
    """`platform:WORKSPACE:CHANNEL (#name)` when the channel's name can be read; any other scope as it is."""
    parts = scope.split(":")
    if len(parts) != 3 or not all(parts):
        return scope
    name = await book.name_of(parts[0], parts[1], "channel", parts[2])
    return f"{scope} (#{name})" if name else scope


async def labelled_people(book: NameBook, platform: str, workspace: str, ids: Sequence[str]) -> list[str]:
    """Each person's id with their name beside it when it can be read (`U123 (@alex)`)."""
    return [await book.labelled(platform, workspace, "user", person) for person in ids]
