"""Daily quotas that hold under concurrency: a question takes one request, each model call reserves its most tokens
before it starts and settles what it used — for API keys and for people alike, through one kind of ledger."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from datetime import date, datetime
from typing import Any, Literal, Protocol, TypeVar

from core.events import Failed, Usage
from core.requests import Actor, ConversationKey

log = logging.getLogger(__name__)

# The least output a call is worth making for: a day with less left than the prompt plus this refuses the call.
MIN_OUTPUT_TOKENS = 1
QuotaLimit = Literal["requests_per_day", "tokens_per_day"]


@dataclass(frozen=True, kw_only=True)
class QuotaRefusal:
    """Why something was refused: which limit, and when the day's counters start again (UTC midnight)."""

    limit: str  # e.g. "requests_per_day", "tokens_per_day"
    allowed: int
    resets_at: datetime
    sentence: str = ""  # what the user is told; the ledger that refused words it


@dataclass(frozen=True, kw_only=True)
class DayLimits:
    """An account's limits for one UTC day; None: counted, never refused."""

    requests_per_day: int | None = None
    tokens_per_day: int | None = None

    @property
    def any(self) -> bool:
        return self.requests_per_day is not None or self.tokens_per_day is not None


@dataclass(frozen=True, kw_only=True)
class Held:
    """Tokens one ledger set aside for one call, on one account and day (settled on that day, past midnight too)."""

    ledger: DayLedger
    account: str
    day: date
    tokens: int


@dataclass(frozen=True, kw_only=True)
class QuotaFailed(Failed):
    """A run ended because a model call did not fit its quota: a Failed whose refusal surfaces can show."""

    refusal: QuotaRefusal | None = None


class QuotaExceeded(Exception):
    """A question or a model call that does not fit what is left of an account's day."""

    def __init__(self, refusal: QuotaRefusal) -> None:
        super().__init__(refusal.sentence)
        self.refusal = refusal


class DayLedger(Protocol):
    """The one kind of ledger (core.store.day_counts.DayCounts): an account's requests and tokens per UTC day.

    Every operation is atomic per account and day: concurrent calls in any number of processes never take more than
    the limits together. An API key's quota and a person's limit are two ledgers of this kind.
    """

    async def take_request(self, account: str, limits: DayLimits) -> QuotaRefusal | None:
        """Count one request, unless a limit is reached: then nothing is counted and the refusal says which."""
        ...

    async def give_back(self, account: str) -> None: ...

    async def reserve(self, account: str, *, tokens_per_day: int | None, want: int, floor: int) -> Held | QuotaRefusal:
        """Set aside `want` tokens, or what is left when less; refused when less than `floor` is left."""
        ...

    async def settle(self, held: Held, used: int) -> None:
        """Replace the reservation by the tokens the call used (less gives the rest back)."""
        ...


@dataclass(frozen=True, kw_only=True)
class Charge:
    """One account a run pays into, known when the run starts (a person's, with the limits of where they ask)."""

    ledger: DayLedger
    account: str
    limits: DayLimits

    async def take_request(self) -> QuotaRefusal | None:
        return await self.ledger.take_request(self.account, self.limits)

    async def reserve(self, *, want: int, floor: int) -> Held | QuotaRefusal:
        return await self.ledger.reserve(self.account, tokens_per_day=self.limits.tokens_per_day, want=want, floor=floor)


class People(Protocol):
    """Which person's account a chat run pays into (core.person_limits.PersonLimits)."""

    def charge(self, conversation: ConversationKey, user: Actor, channel: Any) -> Charge | None:
        """`channel`: the conversation's core.channels.ChannelConfig, whose limits apply there."""
        ...


class WithQuota(Protocol):
    """What `charged` takes: a run's dependencies (a dataclass) holding its quota."""

    quota: TokenQuota | None


Deps = TypeVar("Deps", bound=WithQuota)


class TokenLedger(Protocol):
    """Accounts found from the conversation at each call (core.store.api_keys.ApiKeyStore: an API conversation's key);
    it reserves through its own DayLedger. `platform`: the only platform whose conversations it may charge, so a
    run elsewhere (a Slack click's) never runs its code."""

    platform: str

    def account(self, conversation: ConversationKey, user: Actor) -> str | None:
        """The account this ledger charges for a run there by that user; None: this ledger has no say."""
        ...

    async def reserve(self, account: str, *, want: int, floor: int) -> Held | QuotaRefusal: ...


@dataclass(kw_only=True)
class Grant:
    """One model call's reservation: the output it may ask for, and how to settle it once the model reported."""

    max_output: int | None  # None: no ledger cut the call's own output limit
    prompt_tokens: int
    held: tuple[Held, ...] = ()
    settled: bool = False

    async def settle(self, used: int) -> None:
        if self.settled:
            return
        self.settled = True
        for held in self.held:
            try:
                await held.ledger.settle(held, used)
            except Exception:
                # The reservation stays counted: the account pays at most what was set aside, never more.
                log.warning("could not settle %d reserved tokens of %s", held.tokens, held.account, exc_info=True)


class TokenQuota:
    """The port the agents call around each model call: reserve before, settle after, for every account that pays.

    The reservation is the prompt's counted tokens plus the call's most output, clamped to what is left of the day;
    the call is then made with that clamped output limit, so a reported usage within it never passes the quota.
    `people` (core/person_limits.py) says which person a chat run charges; a run's own quota carries that charge.
    """

    def __init__(self, ledgers: Sequence[TokenLedger] = (), *, people: People | None = None,
                 charges: Sequence[Charge] = ()) -> None:
        self._ledgers = tuple(ledgers)
        self.people = people
        self._charges = tuple(charges)

    def charging(self, charge: Charge) -> TokenQuota:
        """This quota for one run that also pays into `charge`."""
        return TokenQuota(self._ledgers, people=self.people, charges=(*self._charges, charge))

    def asker_charge(self, conversation: ConversationKey, user: Actor, channel: Any) -> Charge | None:
        """The asker's own account for a run there (`channel`: its core.channels.ChannelConfig); None: no person's
        limit applies there, or they are exempt."""
        if self.people is None or not channel.person_limits.any:
            return None
        return self.people.charge(conversation, user, channel)

    def applies(self, *, conversation: ConversationKey, user: Actor) -> bool:
        """Whether some account pays for a run there (else its calls reserve nothing, and no prompt is counted)."""
        return bool(self._charges) or any(
            ledger.account(conversation, user) is not None for ledger in self._ledgers_of(conversation)
        )

    def _ledgers_of(self, conversation: ConversationKey) -> tuple[TokenLedger, ...]:
        return tuple(ledger for ledger in self._ledgers if ledger.platform == conversation.platform)

    async def reserve(self, *, conversation: ConversationKey, user: Actor, prompt_tokens: int,
                      max_output: int) -> Grant:
        """A grant for one call, or QuotaExceeded when some account cannot fit the prompt and a token of output."""
        asked = want = prompt_tokens + max(MIN_OUTPUT_TOKENS, max_output)
        floor = prompt_tokens + MIN_OUTPUT_TOKENS
        held: list[Held] = []
        found = [(ledger, ledger.account(conversation, user)) for ledger in self._ledgers_of(conversation)]
        payers = [partial(ledger.reserve, account) for ledger, account in found if account is not None]
        for reserve in [*payers, *(charge.reserve for charge in self._charges)]:
            outcome = await reserve(want=want, floor=floor)
            if isinstance(outcome, QuotaRefusal):
                # The accounts already reserved for this call give theirs back whole.
                await Grant(max_output=None, prompt_tokens=prompt_tokens, held=tuple(held)).settle(0)
                raise QuotaExceeded(outcome)
            held.append(outcome)
            want = min(want, outcome.tokens)
        # The output limit is the call's own unless some day has less left than it asked for.
        return Grant(max_output=want - prompt_tokens if want < asked else None, prompt_tokens=prompt_tokens,
                     held=tuple(held))


def charged(deps: Deps, conversation: ConversationKey, user: Actor, channel: Any) -> Deps:
    """A resumed run's deps (core.agents.AgentDeps): its model calls pay into its asker's day too, as when it was asked
    (the question took its request then)."""
    quota = deps.quota
    charge = quota.asker_charge(conversation, user, channel) if quota is not None else None
    return deps if quota is None or charge is None else dataclasses.replace(deps, quota=quota.charging(charge))


def used_tokens(usage: Usage) -> int:
    return usage.prompt_tokens + usage.completion_tokens
