"""Names for ids: `#channel` and `@person` resolved through a platform's directory (read once, one ambiguity rule), and ids named back."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

Kind = Literal["channel", "user"]
SIGILS: dict[Kind, str] = {"channel": "#", "user": "@"}
NOUNS: dict[Kind, tuple[str, str]] = {"channel": ("channel", "channels"), "user": ("person", "people")}
# Candidates an ambiguous name lists at most (the rest are counted).
CANDIDATES_SHOWN = 10


@dataclass(frozen=True, kw_only=True)
class Named:
    """A channel or a person as a platform lists them: its id, the name shown beside it, and the other names it
    answers to (a person's handle and real name beside their display name)."""

    id: str
    name: str
    also: tuple[str, ...] = ()

    def answers_to(self, wanted: str) -> bool:
        key = wanted.casefold()
        return any(key == name.casefold() for name in (self.name, *self.also) if name)


class NameDirectory(Protocol):
    """A platform's half (adapters/<platform>/names.py): lists a workspace's channels or people, every call through
    the platform's paced door. `workspace` "" asks for people across every workspace the bot is in (a report whose
    rows name no workspace). Raises NamesUnreadable when the platform cannot be read."""

    async def list(self, kind: Kind, workspace: str) -> Sequence[Named]: ...

    async def close(self) -> None: ...


class NamesUnreadable(Exception):
    """The platform could not be read (not configured, refused, unreachable); the message says why.

    `list_only`: only this list cannot be read (a workspace the bot is not in, a scope the app lacks); the
    platform's other lists still may be."""

    def __init__(self, message: str, *, list_only: bool = False) -> None:
        super().__init__(message)
        self.list_only = list_only


class NameNotFound(ValueError):
    """No channel or person answers to the name."""


class AmbiguousName(ValueError):
    """More than one answers to the name; `candidates` are they."""

    def __init__(self, message: str, candidates: Sequence[Named]) -> None:
        super().__init__(message)
        self.candidates = tuple(candidates)


def is_name(text: str, kind: Kind) -> bool:
    """Whether `text` is a name (`#help`, `@alex`) rather than an id."""
    return text.strip().startswith(SIGILS[kind])


def pick(entries: Sequence[Named], text: str, *, kind: Kind, where: str) -> Named:
    """The one entry answering to `text` (its sigil optional), compared without case on every name it has.

    The rule: exactly one id answers, or the name is refused (none: NameNotFound; several: AmbiguousName with
    them all), so a name never silently picks one of two people."""
    wanted = text.strip().removeprefix(SIGILS[kind]).strip()
    one, many = NOUNS[kind]
    found = {entry.id: entry for entry in entries if entry.answers_to(wanted)}
    shown = f"{SIGILS[kind]}{wanted}"
    if not found:
        raise NameNotFound(f"no {one} in {where} is called {shown}; write its id, or check the name")
    if len(found) > 1:
        candidates = sorted(found.values(), key=lambda entry: (entry.name.casefold(), entry.id))
        listed = ", ".join(_candidate(c) for c in candidates[:CANDIDATES_SHOWN])
        more = f" and {len(candidates) - CANDIDATES_SHOWN} more" if len(candidates) > CANDIDATES_SHOWN else ""
        raise AmbiguousName(
            f"{shown} could be any of {len(candidates)} {many} in {where}: {listed}{more}; write the id instead",
            candidates,
        )
    return next(iter(found.values()))


def _candidate(entry: Named) -> str:
    """`alex (U1, Alex Smith)`: the id, and another name of theirs where it tells two apart."""
    other = next((name for name in entry.also if name.casefold() != entry.name.casefold()), "")
    return f"{entry.name} ({entry.id}{', ' + other if other else ''})"


class NameBook:
    """One command's names: each platform's directory opened when first needed (`opens`: platform → a factory
    returning it, or None where the platform is not configured) and read at most once per (workspace, kind),
    failures too.

    `resolve` turns a name into an id (an id passes through untouched, without a call); `name_of` names an id for
    output, or None when it cannot, and `note` then says once that names could not be read."""

    def __init__(self, opens: Mapping[str, Callable[[], NameDirectory | None]]) -> None:
        self._opens = dict(opens)
        self._directories: dict[str, NameDirectory | None] = {}
        self._lists: dict[tuple[str, str, Kind], dict[str, Named]] = {}
        self._down: dict[str, str] = {}  # platform → why none of its names can be read (unreachable, token refused)
        self._unreadable: dict[tuple[str, Kind, str], str] = {}  # (platform, kind, workspace) → why not that list
        self._absent: set[str] = set()  # platforms without a directory here

    async def resolve(self, platform: str, workspace: str, kind: Kind, text: str) -> str:
        """The id `text` names in the workspace; `text` itself when it is an id. Raises NameNotFound,
        AmbiguousName, or NamesUnreadable (a name given where the platform cannot be read)."""
        if not is_name(text, kind):
            return text.strip()
        entries = await self._entries(platform, workspace, kind)
        if entries is None:
            why = self._failure(platform, kind, workspace) or f"{platform} is not configured here"
            raise NamesUnreadable(f"cannot read {platform}'s {NOUNS[kind][1]} to find {text.strip()} ({why}); "
                                  "write the id instead")
        where = f"{platform}:{workspace}" if workspace else platform
        return pick(list(entries.values()), text, kind=kind, where=where).id

    async def name_of(self, platform: str, workspace: str, kind: Kind, id_: str) -> str | None:
        """The name of the channel or person `id_`, or None (unknown there, or the platform unreadable)."""
        entries = await self._entries(platform, workspace, kind)
        found = entries.get(id_) if entries is not None else None
        return found.name if found is not None else None

    async def labelled(self, platform: str, workspace: str, kind: Kind, id_: str) -> str:
        """`id (#name)` / `id (@name)` when the name is known, else the id alone."""
        name = await self.name_of(platform, workspace, kind, id_)
        return f"{id_} ({SIGILS[kind]}{name})" if name else id_

    def note(self) -> str | None:
        """One line saying which platforms' names could not be read (ids shown alone), or None."""
        if not self._down and not self._unreadable:
            return None
        why = "; ".join([f"{platform}: {reason}" for platform, reason in sorted(self._down.items())] + [
            f"{platform}:{workspace} {NOUNS[kind][1]}: {reason}"
            for (platform, kind, workspace), reason in sorted(self._unreadable.items())])
        return f"Names could not be read, so ids are shown alone ({why})."

    async def close(self) -> None:
        for directory in self._directories.values():
            if directory is not None:
                await directory.close()

    async def _entries(self, platform: str, workspace: str, kind: Kind) -> dict[str, Named] | None:
        key = (platform, workspace, kind)
        if key in self._lists:
            return self._lists[key]
        if self._failure(platform, kind, workspace) is not None or platform in self._absent:
            return None
        if platform not in self._directories:
            self._directories[platform] = self._opens[platform]() if platform in self._opens else None
        directory = self._directories[platform]
        if directory is None:
            # Not configured in this process: nothing to read, and nothing gone wrong to note.
            self._absent.add(platform)
            return None
        try:
            listed = await directory.list(kind, workspace)
        except NamesUnreadable as error:
            if error.list_only:
                self._unreadable[platform, kind, workspace] = str(error)
            else:
                # Its other lists would fail the same way, each after its own retries: none is tried.
                self._down[platform] = str(error)
            return None
        self._lists[key] = {entry.id: entry for entry in listed}
        return self._lists[key]

    def _failure(self, platform: str, kind: Kind, workspace: str) -> str | None:
        return self._down.get(platform) or self._unreadable.get((platform, kind, workspace))
