"""Slack's people as learning from channels needs them: display names and guest flags from users.info, cached and bounded."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from adapters.streaming.transport import PermanentSendError

from .transport import SlackWeb

# People kept per process (a name and two flags each): the oldest looked-up go first.
PEOPLE_KEPT = 20_000
# A person's name or guest status changes rarely; looked up again after this long (Slack seconds).
PERSON_KEEP_S = 3_600.0


@dataclass(frozen=True, kw_only=True)
class Person:
    """A person as users.info tells it: the name shown beside their messages, and whether they are a guest."""

    name: str
    guest: bool = False  # is_restricted (a multi-channel guest) or is_ultra_restricted (a single-channel one)


class SlackPeople:
    """users.info through the door (the workspace's users.info budget, Tier 4), once per person per PERSON_KEEP_S;
    concurrent look-ups of one person share one call. A person Slack does not know (user_not_found: a deleted
    account, another organisation's) is named by their id and counted a guest: unknown is never "a full member"."""

    def __init__(self, web: SlackWeb, *, kept: int = PEOPLE_KEPT) -> None:
        self._web = web
        self._kept = kept
        self._known: OrderedDict[tuple[str, str], tuple[float, Person]] = OrderedDict()
        self._asking: dict[tuple[str, str], asyncio.Future[Person]] = {}

    def known(self, team: str, user: str) -> Person | None:
        """The person if looked up lately, with no call."""
        found = self._known.get((team, user))
        if found is None or self._web.clock.now() - found[0] > PERSON_KEEP_S:
            return None
        return found[1]

    def note(self, team: str, user: str, profile: dict[str, Any]) -> None:
        """A profile an event carried (`user_profile`): its name, with no call. Guest flags only when it says them."""
        name = _name(profile)
        if name and "is_restricted" in profile:
            self._keep((team, user), Person(name=name, guest=_guest(profile)))

    async def person(self, team: str, user: str) -> Person:
        known = self.known(team, user)
        if known is not None:
            return known
        key = (team, user)
        if key in self._asking:
            return await asyncio.shield(self._asking[key])
        future: asyncio.Future[Person] = asyncio.get_running_loop().create_future()
        self._asking[key] = future
        try:
            found = await self._look_up(team, user)
            future.set_result(found)
            return found
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here: a look-up nobody else waited on logs nothing
            raise
        finally:
            self._asking.pop(key, None)
            if not future.done():
                future.cancel()  # this look-up was cancelled: those waiting on it ask again

    async def name(self, team: str, user: str) -> str:
        return (await self.person(team, user)).name

    async def _look_up(self, team: str, user: str) -> Person:
        try:
            response = await self._web.call(team, "users.info", budget=self._web.budgets.other(team, "users.info"), user=user)
        except PermanentSendError as exc:
            if getattr(exc, "code", "") != "user_not_found":
                raise
            found = Person(name=user, guest=True)
        else:
            profile = response.get("user") or {}
            found = Person(name=_name(profile.get("profile") or {}) or str(profile.get("real_name") or profile.get("name")
                                                                           or user), guest=_guest(profile))
        self._keep((team, user), found)
        return found

    def _keep(self, key: tuple[str, str], person: Person) -> None:
        self._known[key] = (self._web.clock.now(), person)
        self._known.move_to_end(key)
        while len(self._known) > self._kept:
            self._known.popitem(last=False)


def _name(profile: dict[str, Any]) -> str:
    return str(profile.get("display_name") or profile.get("real_name") or "")


def _guest(user: dict[str, Any]) -> bool:
    return bool(user.get("is_restricted") or user.get("is_ultra_restricted"))
