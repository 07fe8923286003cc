"""Discord shards claimed by lease in Postgres: a lease lives as long as its owner's heartbeat, then another takes it."""

from __future__ import annotations

import math
from collections.abc import Sequence

from core.store.db import Database
from core.store.heartbeats import STALE_AFTER_S

# Every claim for one bot runs under this lock (with the bot's id), so two claimers never both take a free shard.
SHARD_LOCK_NAMESPACE = "relaybot:discord-shards:"

_LIVE = (
    "EXISTS (SELECT 1 FROM process_heartbeats h WHERE h.owner = {table}.owner"
    " AND h.seen_at > now() - make_interval(secs => %s))"
)

Claim = tuple[tuple[int, ...], str | None]


def refusal(*, shard_count: int, others: Sequence[tuple[str, int]]) -> str:
    """The sentence a process with another shard count than the live ones is refused with."""
    counts = ", ".join(sorted({str(count) for _, count in others}))
    return (
        f"DISCORD_SHARD_COUNT is {shard_count} here but {counts} in {len(others)} other live process(es) of this bot"
        f" ({', '.join(owner for owner, _ in others)}): every process must run with the same count"
        " (to change it, stop them all first)"
    )


class ShardLeases:
    """The shard leases of one process (`owner`, its heartbeat's owner)."""

    def __init__(self, db: Database, *, owner: str) -> None:
        self._db = db
        self.owner = owner

    async def claim(self, *, bot: str, shard_count: int, fixed: Sequence[int] | None = None) -> Claim:
        """Once at start and on every beat: the shards this process holds now, and None; or (), and the refusal
        sentence when live processes of the bot run another shard count (nothing is written then).

        `fixed` (DISCORD_SHARD_IDS) are taken whoever held them; otherwise this process keeps what it holds and
        takes free shards (never leased, or their owner's heartbeat stale) up to its fair part of those the fixed
        members do not hold, and more when the other claiming members have no room left for them: every shard is
        run. Below its even part with none free, it takes one a claim from the claimer holding the most."""
        async with self._db.connection() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (SHARD_LOCK_NAMESPACE + bot,))
            for table in ("discord_shard_members", "discord_shard_leases"):
                await conn.execute(
                    f"DELETE FROM {table} WHERE bot_id = %s AND owner <> %s AND NOT {_LIVE.format(table=table)}",
                    (bot, self.owner, STALE_AFTER_S),
                )
            cursor = await conn.execute(
                "SELECT owner, shard_count, fixed FROM discord_shard_members WHERE bot_id = %s AND owner <> %s"
                " ORDER BY joined_at, owner",
                (bot, self.owner),
            )
            members = [(str(owner), int(count), bool(pinned)) for owner, count, pinned in await cursor.fetchall()]
            mismatched = [(owner, count) for owner, count, _ in members if count != shard_count]
            if mismatched:
                # Nothing written: a newcomer stays no member, a running process keeps what it holds.
                return (), refusal(shard_count=shard_count, others=mismatched)
            await conn.execute(
                "INSERT INTO discord_shard_members (bot_id, owner, shard_count, fixed) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (bot_id, owner) DO UPDATE SET shard_count = EXCLUDED.shard_count, fixed = EXCLUDED.fixed",
                (bot, self.owner, shard_count, fixed is not None),
            )
            cursor = await conn.execute("SELECT shard_id, owner FROM discord_shard_leases WHERE bot_id = %s", (bot,))
            leased = {int(shard_id): str(owner) for shard_id, owner in await cursor.fetchall()}
            mine = {shard for shard, owner in leased.items() if owner == self.owner}
            wanted = set(fixed) if fixed is not None else mine | set(_to_take(shard_count, leased, members, mine))
            await conn.execute(
                "DELETE FROM discord_shard_leases WHERE bot_id = %s AND owner = %s AND NOT (shard_id = ANY(%s))",
                (bot, self.owner, sorted(wanted)),
            )
            for shard in sorted(wanted - mine):
                await conn.execute(
                    "INSERT INTO discord_shard_leases (bot_id, shard_id, shard_count, owner) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (bot_id, shard_id) DO UPDATE SET owner = EXCLUDED.owner,"
                    " shard_count = EXCLUDED.shard_count, claimed_at = now()",
                    (bot, shard, shard_count, self.owner),
                )
            return tuple(sorted(wanted)), None


def _to_take(shard_count: int, leased: dict[int, str], members: list[tuple[str, int, bool]], mine: set[int]) -> list[int]:
    """The shards this claiming process takes: free ones up to its fair part, and any the other claimers would leave
    free; with none free while it holds less than its even part, one from the claimer holding the most."""
    free = [shard for shard in range(shard_count) if shard not in leased]
    pinned = {owner for owner, _, is_fixed in members if is_fixed}
    claimers = [owner for owner, _, is_fixed in members if not is_fixed]
    pool = shard_count - sum(1 for owner in leased.values() if owner in pinned)
    fair = math.ceil(pool / (len(claimers) + 1))
    held = {owner: sum(1 for holder in leased.values() if holder == owner) for owner in claimers}
    others_room = sum(max(0, fair - held[owner]) for owner in claimers)
    taken = free[: max(0, fair - len(mine), len(free) - others_room)]
    even = pool // (len(claimers) + 1)
    if taken or len(mine) >= even or not claimers:
        return taken
    # Nothing free and below the even part: one shard from the claimer holding the most above it. That one runs it
    # until its next claim finds it gone, so both hear it meanwhile (the gate takes each event once): none is missed.
    richest = max(claimers, key=lambda owner: (held[owner], owner))
    if held[richest] <= even:
        return []
    return [max(shard for shard, owner in leased.items() if owner == richest)]
