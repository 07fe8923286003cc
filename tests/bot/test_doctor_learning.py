"""`relaybot doctor`'s line on learning from channels: none chosen, or each state counted and a channel in error named
with its reason, as a warning (the running bot tries it again; nothing else is unhealthy for it)."""

from __future__ import annotations

from pathlib import Path

from bot.doctor import check_learning
from core.config import Settings
from core.learning.model import ChannelPlace
from core.store import learned_channels as store
from core.store.db import Database


async def test_doctor_counts_the_learned_channels_by_state_and_names_one_in_error(
    db: Database, database_url: str, tmp_path: Path,
) -> None:
    settings = Settings(_env_file=None, database_url=database_url, data_dir=tmp_path)  # type: ignore[call-arg]
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
    assert await check_learning(settings) == (True, "none chosen (`relaybot sources add-channel`)")
    rows = []
    for channel, name in (("C1", "incidents"), ("C2", "ops"), ("C3", "random")):
        place = ChannelPlace(platform="slack", workspace="T1", channel=channel)
        rows.append(await store.add_channel(db, place, name=name, private=False, since_days=30, keep_days=None))
    async with db.connection() as conn:
        await store.save_progress(conn, rows[0].source_id, store.Progress(checkpoint={}, state="live"))
        await store.save_progress(conn, rows[2].source_id, store.Progress(
            checkpoint={}, state="error", error="invite @relaybot to #random first (`/invite @relaybot`)"))
    ok, line = await check_learning(settings)
    assert ok
    assert line == ("ok — 3 channels: 1 live, 1 backfilling, 1 error; warning: slack:T1:C3 (#random): "
                    "error: invite @relaybot to #random first (`/invite @relaybot`)")
