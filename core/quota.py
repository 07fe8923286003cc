"""Token quotas that hold under concurrency: each model call reserves its most before it starts and settles what it used."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Protocol

from core.events import Failed, Usage
from core.requests import Actor, ConversationKey

log = logging.getLogger(__name__)

# The least output a call is worth making for: a day with less left than the prompt plus this refuses the call.
MIN_OUTPUT_TOKENS = 1


@dataclass(frozen=True, kw_only=True)
class QuotaRefusal:
    """Why something was refused: which limit, and when the day's counters start again (UTC midnight)."""

    limit: str  # e.g. "requests_per_day", "tokens_per_day"
    allowed: int
    resets_at: datetime
    sentence: str = ""  # what the user is told; the ledger that refused words it


@dataclass(frozen=True, kw_only=True)
class Held:
    """Tokens one ledger set aside for one call, on one account and day (settled on that day, past midnight too)."""

    ledger: TokenLedger
    account: str
    day: date
    tokens: int


@dataclass(frozen=True, kw_only=True)
class QuotaFailed(Failed):
    """A run ended because a model call did not fit its quota: a Failed whose refusal surfaces can show."""

    refusal: QuotaRefusal | None = None


class QuotaExceeded(Exception):
    """A model call that does not fit what is left of an account's day."""

    def __init__(self, refusal: QuotaRefusal) -> None:
        super().__init__(refusal.sentence)
        self.refusal = refusal


class TokenLedger(Protocol):
    """Where one kind of account keeps its day's tokens (core.store.api_keys.ApiKeyStore for API keys).

    `reserve` is atomic per account: concurrent reservations in any number of processes never hold more than the
    limit together. It grants `want` or what is left, whichever is less, or refuses when less than `floor` is left.
    """

    def account(self, conversation: ConversationKey, user: Actor) -> str | None:
        """The account this ledger charges for a run there by that user; None: this ledger has no say."""
        ...

    async def reserve(self, account: str, *, want: int, floor: int) -> Held | QuotaRefusal: ...

    async def settle(self, held: Held, used: int) -> None:
        """Replace the reservation by the tokens the call used (less gives the rest back)."""
        ...


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
    """The port the agents call around each model call: reserve before, settle after, for every ledger that has a say.

    The reservation is the prompt's counted tokens plus the call's most output, clamped to what is left of the day;
    the call is then made with that clamped output limit, so a reported usage within it never passes the quota.
    """

    def __init__(self, ledgers: Sequence[TokenLedger] = ()) -> None:
        self._ledgers = tuple(ledgers)

    def applies(self, *, conversation: ConversationKey, user: Actor) -> bool:
        """Whether some account pays for a run there (else its calls reserve nothing, and no prompt is counted)."""
        return any(ledger.account(conversation, user) is not None for ledger in self._ledgers)

    async def reserve(self, *, conversation: ConversationKey, user: Actor, prompt_tokens: int,
                      max_output: int) -> Grant:
        """A grant for one call, or QuotaExceeded when some account cannot fit the prompt and a token of output."""
        asked = want = prompt_tokens + max(MIN_OUTPUT_TOKENS, max_output)
        floor = prompt_tokens + MIN_OUTPUT_TOKENS
        held: list[Held] = []
        for ledger in self._ledgers:
            account = ledger.account(conversation, user)
            if account is None:
                continue
            outcome = await ledger.reserve(account, want=want, floor=floor)
            if isinstance(outcome, QuotaRefusal):
                # The accounts already reserved for this call give theirs back whole.
                await Grant(max_output=None, prompt_tokens=prompt_tokens, held=tuple(held)).settle(0)
                raise QuotaExceeded(outcome)
            held.append(outcome)
            want = min(want, outcome.tokens)
        # The output limit is the call's own unless some day has less left than it asked for.
        return Grant(max_output=want - prompt_tokens if want < asked else None, prompt_tokens=prompt_tokens,
                     held=tuple(held))


def used_tokens(usage: Usage) -> int:
    return usage.prompt_tokens + usage.completion_tokens
