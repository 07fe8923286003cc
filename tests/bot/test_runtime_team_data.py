"""The runtime hands each adapter that asks for it what drops a team's pending work (core/store/team_data.py):
a guild removing the bot under `relaybot run` has its kept final dropped, another guild's left for delivery."""

from __future__ import annotations

from pathlib import Path

from bot.runtime import Runtime
from core.ports import FinalPart, PendingFinal
from core.store.db import Database
from core.store.pending_finals import PendingFinals
from tests.emulators.discord import DiscordEmulator, point_discord_py_at
from tests.emulators.openai_server import OpenAIEmulator
from tests.support.engine import test_settings as settings_for


async def finals(db: Database, guild_id: int) -> int:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM pending_finals WHERE platform = 'discord' AND workspace = %s",
                                    (str(guild_id),))
        row = await cursor.fetchone()
        return int(row[0]) if row else 0


async def test_a_guild_removing_the_bot_under_the_runtime_has_its_pending_work_dropped(
    database_url: str, db: Database, openai_emulator: OpenAIEmulator, discord_emulator: DiscordEmulator, tmp_path: Path,
) -> None:
    dc = discord_emulator
    removed, kept = dc.add_guild("removed"), dc.add_guild("kept")
    dc.add_channel(removed, "general"), dc.add_channel(kept, "general")
    settings = settings_for(
        openai_emulator.base_url, database_url=database_url, data_dir=tmp_path, http_port=0,
        discord_token=dc.token, discord_api_base=dc.api_base, discord_gateway_url=dc.gateway_url,
    )
    runtime = Runtime(settings)
    with point_discord_py_at(dc):
        try:
            await runtime.start()
            # Kept by a process that is still alive (so this one does not deliver them meanwhile).
            alive = PendingFinals(db, owner=runtime.owner)
            for guild_id in (removed, kept):
                await alive.keep(PendingFinal(answer_id=f"answer-{guild_id}", platform="discord", workspace=str(guild_id),
                                              channel="1", thread="", parts=(FinalPart(text="kept"),)))
            await dc.remove_bot_from_guild(removed)
            await dc.wait_for(lambda: _zero(db, removed), what="the removed guild's final dropped")
            assert await finals(db, kept) == 1
        finally:
            await runtime.stop()


async def _zero(db: Database, guild_id: int) -> bool:
    return await finals(db, guild_id) == 0
