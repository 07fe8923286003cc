"""Discord's 👍/👎 under a final answer (DynamicItems whose custom_id names the vote and run), and the 👎 modal asking why."""

from __future__ import annotations

import logging
import re
from typing import Any

import discord

from adapters import wording
from adapters.gate import Gate
from core.ports import FeedbackVotes

from . import transport_calls as calls

log = logging.getLogger(__name__)

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
FEEDBACK_ID_TEMPLATE = rf"rb:f:(?P<vote>[ud]):(?P<run>{_UUID})"
WHY_ID = re.compile(rf"rb:fw:(?P<run>{_UUID})")
WHY_INPUT = "why"
# Discord: a text input holds at most 4,000 characters; a reason needs far fewer.
WHY_MAX_CHARS = 2000
# How long this process keeps an open modal object; a later submission is still taken (on_interaction).
MODAL_KEPT_S = 900.0


class FeedbackButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=FEEDBACK_ID_TEMPLATE):
    """👍 or 👎: works after a restart and in any process, since the custom_id says all a click needs."""

    def __init__(self, vote: str, run_id: str) -> None:
        super().__init__(discord.ui.Button(
            emoji="👍" if vote == "u" else "👎", style=discord.ButtonStyle.secondary, custom_id=f"rb:f:{vote}:{run_id}",
        ))
        self.up = vote == "u"
        self.run_id = run_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str], /
    ) -> FeedbackButton:
        return cls(match["vote"], match["run"])

    async def callback(self, interaction: discord.Interaction) -> None:
        feedback: DiscordFeedback | None = getattr(interaction.client, "feedback", None)
        if feedback is None:
            raise RuntimeError("the Discord client has no feedback handler")
        await feedback.click(interaction, up=self.up, run_id=self.run_id)


def feedback_view(run_id: str) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    view.add_item(FeedbackButton("u", run_id))
    view.add_item(FeedbackButton("d", run_id))
    return view


class WhyModal(discord.ui.Modal):
    """The 👎 modal: one optional paragraph. Its submission is taken by DiscordFeedback.on_interaction, by custom_id,
    so a modal opened before a restart (or by another process) is still stored."""

    def __init__(self, run_id: str) -> None:
        super().__init__(title=wording.FEEDBACK_MODAL_TITLE, custom_id=f"rb:fw:{run_id}", timeout=MODAL_KEPT_S)
        self.add_item(discord.ui.TextInput(
            label=wording.FEEDBACK_MODAL_LABEL, custom_id=WHY_INPUT, style=discord.TextStyle.paragraph,
            required=False, max_length=WHY_MAX_CHARS, placeholder=wording.FEEDBACK_MODAL_PLACEHOLDER,
        ))

    async def on_submit(self, interaction: discord.Interaction) -> None:
        return None  # answered by DiscordFeedback.on_interaction, which sees every submission


class DiscordFeedback:
    """👍/👎 clicks and 👎 reasons: each answered within Discord's 3 s, then one call to the feedback store."""

    def __init__(self, *, feedback: FeedbackVotes, gate: Gate) -> None:
        self._feedback = feedback
        self._gate = gate

    async def click(self, interaction: discord.Interaction, *, up: bool, run_id: str) -> None:
        if not self._gate.accepting:
            await calls.respond(interaction, wording.shutting_down())
            return
        with self._gate.track():
            if up:
                await calls.acknowledge(interaction, ephemeral=True, thinking=True)
            else:
                # The modal must be the interaction's first response: Discord refuses one after a defer.
                await calls.show_modal(interaction, WhyModal(run_id))
            try:
                kept = await self._feedback.vote(
                    run_id, user_id=str(interaction.user.id), user_name=interaction.user.name, platform="discord",
                    up=up, workspace=guild_of(interaction),
                )
            except Exception:
                log.exception("feedback click on run %s failed", run_id)
                kept = None
            if up:
                text = (wording.click_failed() if kept is None else
                        wording.feedback_thanks(up=True) if kept else wording.feedback_unknown_answer())
                await _followup(interaction, text)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """Every interaction passes here (the client's on_interaction); only a 👎 modal's submission is taken."""
        if interaction.type != discord.InteractionType.modal_submit:
            return
        data: Any = interaction.data or {}
        match = WHY_ID.fullmatch(str(data.get("custom_id") or ""))
        if match is None:
            return
        if not self._gate.accepting:
            await calls.respond(interaction, wording.shutting_down())
            return
        with self._gate.track():
            await calls.acknowledge(interaction, ephemeral=True, thinking=True)
            run_id = match["run"]
            try:
                kept = await self._feedback.comment(
                    run_id, user_id=str(interaction.user.id), user_name=interaction.user.name, platform="discord",
                    text=submitted(data.get("components") or [], WHY_INPUT)[:WHY_MAX_CHARS],
                    workspace=guild_of(interaction),
                )
            except Exception:
                log.exception("could not store the 👎 reason on run %s", run_id)
                await _followup(interaction, wording.click_failed())
                return
            await _followup(interaction, wording.feedback_comment_thanks() if kept else wording.feedback_unknown_answer())


def guild_of(interaction: discord.Interaction) -> str | None:
    """The guild a click came from, whose answers alone it may vote on (None in a DM, where no guild's can be)."""
    return str(interaction.guild_id) if interaction.guild_id else None


def submitted(components: list[Any], custom_id: str) -> str:
    """A text input's value in a modal submission (inside action rows, or Discord's newer label components)."""
    for component in components:
        if not isinstance(component, dict):
            continue
        if component.get("custom_id") == custom_id:
            return str(component.get("value") or "")
        inner = component.get("components") or ([component["component"]] if "component" in component else [])
        found = submitted(inner, custom_id)
        if found:
            return found
    return ""


async def _followup(interaction: discord.Interaction, text: str) -> None:
    try:
        await calls.tell(interaction, text)
    except Exception:
        log.warning("could not tell the clicker: %s", text, exc_info=True)
