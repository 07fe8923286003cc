"""Discord's Stop button: a DynamicItem on an answer's first message (custom_id names the run), dropped by the final edit."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import discord

from adapters import wording
from adapters.gate import Gate
from core.requests import Actor

from . import transport_calls as calls
from .buttons import team_of
from .wording import mention

log = logging.getLogger(__name__)

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
STOP_ID_TEMPLATE = rf"rb:s:(?P<run>{_UUID})"
STOP_LABEL = "⏹ Stop"


class StopButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=STOP_ID_TEMPLATE):
    """Works after a restart and in any process: the click is decided by the engine through Postgres."""

    def __init__(self, run_id: str) -> None:
        super().__init__(discord.ui.Button(label=STOP_LABEL, style=discord.ButtonStyle.danger, custom_id=f"rb:s:{run_id}"))
        self.run_id = run_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str], /
    ) -> StopButton:
        return cls(match["run"])

    async def callback(self, interaction: discord.Interaction) -> None:
        stops: DiscordStops | None = getattr(interaction.client, "stops", None)
        if stops is None:
            raise RuntimeError("the Discord client has no Stop handler")
        await stops.handle(interaction, self.run_id)


def stop_view(run_id: str) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    view.add_item(StopButton(run_id))
    return view


class DiscordStops:
    """Stop clicks: a deferred update answers within Discord's 3 s, then one call to the engine."""

    def __init__(self, *, runs: Any, gate: Gate, actor_of: Callable[..., Actor]) -> None:
        self._runs = runs  # core.runs.Runs: stop(run_id, actor=…)
        self._gate = gate
        self._actor_of = actor_of  # inbound.actor_of (inbound builds surfaces, which draw this button)

    async def handle(self, interaction: discord.Interaction, run_id: str) -> None:
        if not self._gate.accepting:
            await calls.respond(interaction, wording.shutting_down())
            return
        with self._gate.track():
            await calls.acknowledge(interaction)
            try:
                actor = self._actor_of(interaction.user, permissions=interaction.permissions if interaction.guild_id else None)
                # A guild's Stop finds only that guild's runs (a DM names no guild).
                team = team_of(interaction)
                result = await self._runs.stop(run_id, actor=actor, mention=mention, team=team)
                if result.outcome != "stopping":
                    await calls.tell(interaction, result.message)
            except Exception:
                log.exception("Stop click on run %s failed", run_id)
                try:
                    await calls.tell(interaction, wording.click_failed())
                except Exception:
                    log.exception("could not tell the clicker the Stop failed")
