"""Token usage per turn in Postgres (where, who, which model, when), and the sums `relaybot usage` reports."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from core.store.db import Database

UsageGrouping = Literal["channel", "user", "day"]

# What each grouping shows, as (column name, SQL expression); the report groups and orders by them.
_GROUPS: dict[str, tuple[tuple[str, str], ...]] = {
    "channel": (("platform", "platform"), ("workspace", "workspace"), ("channel", "channel")),
    "user": (("platform", "platform"), ("user", "user_id")),
    "day": (("day", "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')"),),
}


@dataclass(frozen=True, kw_only=True)
class TurnUsage:
    """The tokens of one run of a turn; a resumed run adds to its turn's row."""

    turn_id: str
    platform: str
    workspace: str
    channel: str
    user: str
    model: str
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, kw_only=True)
class UsageLine:
    """One line of the report: the group's columns in order, then its sums."""

    group: tuple[tuple[str, str], ...]
    turns: int
    tokens_in: int
    tokens_out: int

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out


class UsageLog:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, usage: TurnUsage) -> None:
        async with self._db.connection() as conn:
            await conn.execute(
                "INSERT INTO token_usage (turn_id, platform, workspace, channel, user_id, model, prompt_tokens,"
                " completion_tokens) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (turn_id) DO UPDATE SET"
                " prompt_tokens = token_usage.prompt_tokens + EXCLUDED.prompt_tokens,"
                " completion_tokens = token_usage.completion_tokens + EXCLUDED.completion_tokens,"
                " model = EXCLUDED.model, updated_at = now()",
                (usage.turn_id, usage.platform, usage.workspace, usage.channel, usage.user, usage.model,
                 usage.prompt_tokens, usage.completion_tokens),
            )

    async def report(
        self, *, by: UsageGrouping, since: datetime | None = None, team: tuple[str, str] | None = None
    ) -> list[UsageLine]:
        """Sums per group, of turns started at or after `since` (all when None) and of one team, (platform,
        workspace), when given — a team's report counts nobody else's turns — in the group's order."""
        columns = _GROUPS[by]
        expressions = ", ".join(expression for _, expression in columns)
        conditions, params = [], []
        if since is not None:
            conditions.append("created_at >= %s")
            params.append(since)
        if team is not None:
            conditions.append("platform = %s AND workspace = %s")
            params.extend(team)
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                f"SELECT {expressions}, count(*), coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0)"
                f" FROM token_usage {where} GROUP BY {expressions} ORDER BY {expressions}",
                tuple(params),
            )
            rows = await cursor.fetchall()
        width = len(columns)
        return [
            UsageLine(
                group=tuple((name, str(value)) for (name, _), value in zip(columns, row[:width])),
                turns=int(row[width]), tokens_in=int(row[width + 1]), tokens_out=int(row[width + 2]),
            )
            for row in rows
        ]
