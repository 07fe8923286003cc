"""Each process's share of the platforms' budgets, from the live processes' heartbeats: refreshed on the beat, read from memory."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import psycopg
from psycopg.types.json import Jsonb

log = logging.getLogger(__name__)

# Refreshes are taken one at a time across processes: each reads the shares the others use and publishes its own
# in one transaction, so two processes never both take room the other has not given up yet.
SHARE_LOCK_KEY = 0x7368617265  # "share"
# Float sums of 1/N land a hair off; a share this close to its 1/N has it.
SHARE_EPSILON = 1e-9


def fair_share(others: Iterable[float], *, weight: float = 1.0, weights: Iterable[float] | None = None) -> float:
    """The share a process takes of a budget the live `others` use too (the shares they use now): its weight's part of
    all the live processes' weights (1 each unless given: 1/N of N processes), but never more than the others leave,
    so the shares never sum above 1. A process that joins gets what is left (nothing while the others still use it
    all) until they count it at their next beat and make room."""
    taken = list(others)
    return max(0.0, min(ideal_share(weight, list(weights) if weights is not None else [1.0] * len(taken)),
                        1.0 - sum(taken)))


def ideal_share(weight: float, others: list[float]) -> float:
    """`weight`'s part of it and the others' weights together; 1/N when none of them weighs anything."""
    total = weight + sum(others)
    return weight / total if total > 0 else 1.0 / (len(others) + 1)


class BudgetShares:
    """What share of each platform budget this process (`owner`) uses (a scope: 'slack:T123', 'discord:<bot>') and
    the limits learnt from 429s by any process (a scope: 'slack:T123:chat.postMessage', in calls a second).

    `serve` and `learned` read memory only; `refresh` (the heartbeat's, in its transaction) brings both up to date
    from the other live processes' rows. A scope first served here starts at nothing and asks for a beat at once
    (`wake`): the processes already using it keep their shares until they see it. When the database cannot be
    reached the shares stay as they are; a scope never counted then takes 1/(N+1) of the N processes last seen using
    it. `follow` is told after every change (a budget changes its rate then; its waiting callers stay queued).

    `weigh` says how much of a scope's work this process has (a Discord process: the guilds of its shards), published
    with its share: each process's share is then its weight's part of the live processes' weights, 1 each by default."""

    def __init__(self, *, owner: str, stale_after_s: float) -> None:
        self.owner = owner
        self.stale_after_s = stale_after_s
        self._shares: dict[str, float] = {}
        self._counted: set[str] = set()  # scopes whose share a refresh has set
        self._seen: dict[str, list[float]] = {}  # the others' shares at the last refresh
        self._seen_weights: dict[str, list[float]] = {}  # and their weights, in the same order
        self._weights: dict[str, float] = {}
        self._learned: dict[str, float] = {}
        self._to_publish: dict[str, float] = {}
        self._followers: list[Callable[[], None]] = []
        self.wake: Callable[[], None] | None = None
        # What a refresh read, used once its transaction commits: (shares wanted, the others' shares and weights,
        # learned limits).
        self._after_commit: tuple[
            dict[str, float], dict[str, list[float]], dict[str, list[float]], dict[str, float]
        ] | None = None

    def serve(self, scope: str) -> float:
        """This process's share of `scope` now (from memory); the first call makes it one this process serves."""
        if scope not in self._shares:
            self._shares[scope] = 0.0
            if self.wake is not None:
                self.wake()
        return self._shares[scope]

    def served(self) -> dict[str, float]:
        return dict(self._shares)

    def weigh(self, scope: str, weight: float) -> None:
        """How much of `scope`'s work this process has (at least 0; 1 until told): used from the next beat, which a
        change asks for at once."""
        weight = max(0.0, float(weight))
        if self._weights.get(scope, 1.0) == weight:
            return
        self._weights[scope] = weight
        if scope in self._shares and self.wake is not None:
            self.wake()

    def _ideal(self, scope: str) -> float:
        """The share `scope`'s weights give this process among the others last seen."""
        others = self._seen_weights.get(scope, [1.0] * len(self._seen.get(scope, ())))
        return ideal_share(self._weights.get(scope, 1.0), others)

    @property
    def short(self) -> bool:
        """A scope is under its part (the others have not made room yet): worth a refresh before the next beat."""
        return any(
            share < self._ideal(scope) - SHARE_EPSILON for scope, share in self._shares.items() if scope in self._counted
        )

    def follow(self, changed: Callable[[], None]) -> None:
        """`changed()` is called after shares or learned limits change."""
        self._followers.append(changed)

    def learned(self, scope: str) -> float | None:
        """The limit the processes learnt for `scope` (calls a second for the whole platform), if any."""
        return self._learned.get(scope)

    def learn(self, scope: str, per_s: float) -> None:
        """This process measured `scope`'s limit: used here at once, written for every process at the next beat."""
        if per_s <= 0 or self._learned.get(scope) == per_s:
            return
        self._learned[scope] = self._to_publish[scope] = per_s

    async def refresh(self, conn: psycopg.AsyncConnection) -> None:
        """On the beat, inside the heartbeat's transaction (its row is written here): the shares the live processes
        leave, and the limits any of them learnt. A share that goes down is used before it is published, one that goes
        up after (the transaction committed), so what the processes use never sums above 1."""
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SHARE_LOCK_KEY,))
        cursor = await conn.execute(
            "SELECT shares, weights FROM process_heartbeats WHERE owner <> %s"
            " AND seen_at > now() - make_interval(secs => %s)",
            (self.owner, self.stale_after_s),
        )
        seen: dict[str, list[float]] = {}
        seen_weights: dict[str, list[float]] = {}
        for shares, weights in await cursor.fetchall():
            for scope, share in (shares or {}).items():
                seen.setdefault(scope, []).append(float(share))
                seen_weights.setdefault(scope, []).append(float((weights or {}).get(scope, 1.0)))
        mine = {scope: self._weights.get(scope, 1.0) for scope in self._shares}
        wanted = {
            scope: fair_share(seen.get(scope, ()), weight=mine[scope], weights=seen_weights.get(scope, ()))
            for scope in self._shares
        }
        await conn.execute(
            "INSERT INTO process_heartbeats (owner, seen_at, shares, weights) VALUES (%s, now(), %s, %s)"
            " ON CONFLICT (owner) DO UPDATE SET seen_at = now(), shares = EXCLUDED.shares, weights = EXCLUDED.weights",
            (self.owner, Jsonb(wanted), Jsonb(mine)),
        )
        for scope, per_s in self._to_publish.items():
            await conn.execute(
                "INSERT INTO learned_limits (scope, per_s, learned_by) VALUES (%s, %s, %s)"
                " ON CONFLICT (scope) DO UPDATE SET per_s = EXCLUDED.per_s, learned_by = EXCLUDED.learned_by,"
                " learned_at = now()",
                (scope, per_s, self.owner),
            )
        cursor = await conn.execute("SELECT scope, per_s FROM learned_limits")
        learned = {scope: float(per_s) for scope, per_s in await cursor.fetchall()}
        lower = {scope: share for scope, share in wanted.items() if share < self._shares.get(scope, 0.0)}
        self._apply(lower)
        self._after_commit = (wanted, seen, seen_weights, learned)

    def committed(self) -> None:
        """The refresh's transaction committed: shares that went up, and what was learnt, are used now."""
        if self._after_commit is None:
            return
        wanted, seen, seen_weights, learned = self._after_commit
        self._after_commit = None
        self._seen, self._seen_weights = seen, seen_weights
        self._counted |= set(wanted)
        self._to_publish = {scope: per_s for scope, per_s in self._to_publish.items() if learned.get(scope) != per_s}
        learned = {**learned, **self._to_publish}
        learned_changed, self._learned = learned != self._learned, learned
        if not self._apply(wanted) and learned_changed:
            self._notify()

    def unreachable(self) -> None:
        """The refresh failed (the database did not answer): every share stays; a scope never counted takes the
        smallest share of the processes last seen using it."""
        self._after_commit = None
        fresh = {scope: self._ideal(scope) for scope in self._shares if scope not in self._counted}
        self._apply({scope: share for scope, share in fresh.items() if share > self._shares[scope]})

    def _apply(self, shares: dict[str, float]) -> bool:
        """Uses `shares`; True when one changed (the followers were told)."""
        changed = {scope: share for scope, share in shares.items() if scope in self._shares and self._shares[scope] != share}
        if not changed:
            return False
        self._shares.update(changed)
        log.info("budget shares: %s", ", ".join(f"{scope} {share:.3f}" for scope, share in sorted(changed.items())))
        self._notify()
        return True

    def _notify(self) -> None:
        for changed in self._followers:
            try:
                changed()
            except Exception:
                log.exception("a budget could not take its new share")
