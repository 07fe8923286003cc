"""Token usage: one row per turn (a resumed part adds to it), summed by channel, user or day, since a moment."""

from __future__ import annotations

from datetime import datetime, timezone

from core.store.db import Database
from core.store.usage import TurnUsage, UsageLog


def turn(turn_id: str, *, channel: str = "C1", user: str = "U1", platform: str = "slack", tokens: tuple[int, int] = (10, 2)) -> TurnUsage:
    return TurnUsage(
        turn_id=turn_id, platform=platform, workspace="T1", channel=channel, user=user, model="m",
        prompt_tokens=tokens[0], completion_tokens=tokens[1],
    )


async def started_at(db: Database, turn_id: str, when: str) -> None:
    async with db.connection() as conn:
        await conn.execute("UPDATE token_usage SET created_at = %s WHERE turn_id = %s", (datetime.fromisoformat(when), turn_id))


async def test_sums_by_channel_user_and_day_with_a_resumed_part_in_its_turn(db: Database) -> None:
    log = UsageLog(db)
    await log.add(turn("u-t1", channel="C1", user="U1", tokens=(100, 10)))
    await log.add(turn("u-t1", channel="C1", user="U1", tokens=(50, 5)))  # the same turn, resumed after approval
    await log.add(turn("u-t2", channel="C2", user="U1", tokens=(7, 3)))
    await log.add(turn("u-t3", channel="C2", user="U2", platform="discord", tokens=(1, 1)))
    await started_at(db, "u-t1", "2026-03-01T23:59:00+00:00")
    await started_at(db, "u-t2", "2026-03-02T00:01:00+00:00")
    await started_at(db, "u-t3", "2026-03-02T12:00:00+00:00")

    by_channel = [(dict(l.group), l.turns, l.tokens_in, l.tokens_out) for l in await log.report(by="channel")]
    assert by_channel == [
        ({"platform": "discord", "workspace": "T1", "channel": "C2"}, 1, 1, 1),
        ({"platform": "slack", "workspace": "T1", "channel": "C1"}, 1, 150, 15),
        ({"platform": "slack", "workspace": "T1", "channel": "C2"}, 1, 7, 3),
    ]
    by_user = [(dict(l.group), l.tokens) for l in await log.report(by="user")]
    assert by_user == [({"platform": "discord", "user": "U2"}, 2), ({"platform": "slack", "user": "U1"}, 175)]
    by_day = [(dict(l.group)["day"], l.turns, l.tokens) for l in await log.report(by="day")]
    assert by_day == [("2026-03-01", 1, 165), ("2026-03-02", 2, 12)]
    since = await log.report(by="day", since=datetime(2026, 3, 2, tzinfo=timezone.utc))
    assert [(dict(l.group)["day"], l.turns) for l in since] == [("2026-03-02", 2)]
