"""Per-person daily limits: whose chat questions are counted, against which limits, and a run's deps that pay for them."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection
from datetime import datetime, timezone

import psycopg
from psycopg_pool import PoolTimeout

from core import wording
from core.agents.run_values import AgentDeps
from core.api_access import API_PLATFORM
from core.channels import ChannelConfig
from core.quota import Charge, DayLedger, QuotaLimit, QuotaRefusal, charged
from core.requests import Actor, ConversationKey
from core.store.day_counts import DayCounts
from core.store.db import Database

# `charged` (a resumed run's deps) lives in core.quota, so a resumed run runs no code of this module: it is
# named here beside `admitted`, its counterpart for a new question.
__all__ = ["NotAdmitted", "PersonLimits", "admitted", "charged", "person_account", "person_ledger", "person_refusal"]

log = logging.getLogger(__name__)


class NotAdmitted(ValueError):
    """A question refused before its run starts: its asker is over a limit, or their count could not be taken.
    The message is the sentence the asker is shown."""


def person_account(platform: str, workspace: str, user_id: str) -> str:
    """A person's account in the ledger, one per team they ask in (`slack:T1:U1`): a limit one team sets is never
    spent by questions asked in another."""
    return f"{platform}:{workspace}:{user_id}"


def account_person(account: str) -> tuple[str, str, str]:
    """(platform, workspace, user) of an account; one written before accounts were per team has workspace ''."""
    platform, _, rest = account.partition(":")
    workspace, _, user = rest.rpartition(":")
    return platform, workspace, user


def person_refusal(limit: QuotaLimit, allowed: int, resets_at: datetime) -> QuotaRefusal:
    """A person's refusal, worded once for every surface (Slack, Discord, the terminal chat)."""
    resets = resets_at.astimezone(timezone.utc)
    what = "questions" if limit == "requests_per_day" else "tokens"
    return QuotaRefusal(limit=limit, allowed=allowed, resets_at=resets,
                        sentence=wording.person_limit_reached(what, allowed, resets))


def person_ledger(db: Database) -> DayCounts:
    """People's ledger: the same kind as API keys' (core/store/day_counts.py), over person_usage."""
    return DayCounts(db, table="person_usage", account_column="person", refusal=person_refusal)


class PersonLimits:
    """Who is limited where: a chat run's asker pays into their own account in `ledger` when the channel (or its
    workspace, or the settings) sets a limit, unless they are exempt. API conversations are their key's to pay."""

    def __init__(self, *, ledger: DayLedger, exempt: Collection[str] = (), exempt_approvers: bool = False) -> None:
        self.ledger = ledger
        self._exempt = frozenset(exempt)
        self._exempt_approvers = exempt_approvers

    def exempt(self, user: Actor, channel: ChannelConfig) -> bool:
        if user.id in self._exempt:
            return True
        # A resumed run's asker carries only an id: their roles and admin flag are not known again then.
        return self._exempt_approvers and (
            user.is_admin or user.id in channel.approvers or bool(user.roles & channel.approver_roles))

    def charge(self, conversation: ConversationKey, user: Actor, channel: ChannelConfig) -> Charge | None:
        """The account a run there by `user` pays into; None: nobody's limits apply (nothing is counted)."""
        if conversation.platform == API_PLATFORM or not channel.person_limits.any or self.exempt(user, channel):
            return None
        return Charge(ledger=self.ledger, account=person_account(conversation.platform, conversation.workspace, user.id),
                      limits=channel.person_limits)


async def admitted(deps: AgentDeps, conversation: ConversationKey, user: Actor, channel: ChannelConfig) -> AgentDeps:
    """A new question's deps: its asker's request taken (NotAdmitted when over a limit: nothing is counted), and
    every model call of its run reserved against their day too (a resumed run's: core.quota.charged)."""
    quota = deps.quota
    charge = quota.asker_charge(conversation, user, channel) if quota is not None else None
    if quota is None or charge is None:
        return deps
    try:
        refusal = await charge.take_request()
    except (psycopg.Error, PoolTimeout):
        log.exception("could not count a question against its asker's limit")
        raise NotAdmitted(wording.database_unavailable()) from None
    if refusal is not None:
        raise NotAdmitted(refusal.sentence)
    return dataclasses.replace(deps, quota=quota.charging(charge))
