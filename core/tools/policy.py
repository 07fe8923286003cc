"""Who may approve or reject a paused tool call: the requester, listed approvers and roles, or an admin."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from core import wording


def _as_is(user: str) -> str:
    return user


@dataclass(frozen=True, kw_only=True)
class ApprovalPolicy:
    """Approvers and roles come from settings; whether an actor is a platform admin comes from the adapter."""

    approvers: frozenset[str] = frozenset()
    approver_roles: frozenset[str] = frozenset()

    def may_decide(
        self,
        *,
        actor: str,
        requested_by: str,
        actor_roles: Collection[str] = (),
        actor_is_admin: bool = False,
    ) -> bool:
        if actor_is_admin:
            return True
        # An empty id is never a match: a payload missing its user must not pass as the requester.
        if not actor:
            return False
        if actor == requested_by or actor in self.approvers:
            return True
        return any(role in self.approver_roles for role in actor_roles)

    def describe(
        self, requested_by: str, *, mention: Callable[[str], str] = _as_is, admins: bool = True,
        sentence: Callable[[str], str] = wording.only_they_may_decide,
    ) -> str:
        """The sentence telling a refused clicker who can decide; `mention` formats user ids for the platform,
        `admins` says whether the platform has an admin rule at all (Discord's Manage Server; Slack has none);
        `sentence` words it for what was refused (a decision by default; a Stop)."""
        who = [f"{mention(requested_by)} (who asked)"]
        who += [mention(user) for user in sorted(self.approvers) if user != requested_by]
        if self.approver_roles:
            who.append(wording.anyone_with_roles(sorted(self.approver_roles)))
        if admins:
            who.append("an admin")
        listing = ", ".join(who[:-1]) + f" or {who[-1]}" if len(who) > 1 else who[0]
        return sentence(listing)
