"""Approval clicks: answered within 3 s, decided by engine.approvals in one call, shown by the shared runner."""

from __future__ import annotations

import logging

import discord

from adapters import wording
from adapters.answers import AnswerRunner
from adapters.gate import Gate
from adapters.streaming import Clock, RateBudget
from core import wording as engine_wording
from core.approvals import ApprovalService, ApprovalView

from . import buttons, render
from .buttons import ButtonTarget
from .inbound import actor_of, guild_of, workspace_of
from .surface import DiscordSurface, DiscordSurfaces
from .transport import NO_PINGS, send_after_answers, send_reliably
from .wording import mention

log = logging.getLogger(__name__)


class DiscordClicks:
    """Handles every Approve/Reject click, including clicks on buttons posted before a restart."""

    def __init__(
        self, *, approvals: ApprovalService, runner: AnswerRunner, surfaces: DiscordSurfaces, gate: Gate
    ) -> None:
        self._approvals = approvals
        self._runner = runner
        self._surfaces = surfaces
        self._gate = gate

    async def check(self, interaction: discord.Interaction) -> bool:
        """Run on every click before the callback; a refusal is always answered."""
        if not self._gate.accepting:
            await interaction.response.send_message(wording.shutting_down(), ephemeral=True)
            return False
        if not self._gate.allows(guild_of(interaction.guild_id)):
            # Said as if the approval did not exist: a guild outside the allow-list learns nothing of it.
            await interaction.response.send_message(engine_wording.approval_not_found(), ephemeral=True)
            return False
        return True

    async def handle(self, interaction: discord.Interaction, target: ButtonTarget) -> None:
        with self._gate.track():
            # A deferred update answers within Discord's 3 s; the message is edited afterwards.
            await interaction.response.defer()
            channel_id = interaction.channel_id or (interaction.message.channel.id if interaction.message else 0)
            reply = _ClickReply(interaction, budget=self._surfaces.budgets(channel_id), clock=self._surfaces.clock)
            try:
                message, channel = interaction.message, interaction.channel
                if message is None or channel is None:
                    raise RuntimeError("a button click without its message or channel")
                # Built before the click: once it claims the run, nothing may stop the run from being shown.
                surface = self._resumed_surface(interaction, channel, message_id=message.id, channel_id=channel_id)
                result = await self._approvals.click(
                    target.continuation_id, call_index=target.call_index, approved=target.approve,
                    actor=actor_of(interaction.user, permissions=interaction.permissions if interaction.guild_id else None),
                    mention=mention,
                )
                await self._runner.settle_click(result, reply, surface, message_key=str(message.id))
            except Exception:
                log.exception("approval click failed")
                await reply.tell(wording.click_failed())

    def _resumed_surface(
        self, interaction: discord.Interaction, channel: object, *, message_id: int, channel_id: int
    ) -> DiscordSurface:
        """The resumed run streams where the approval message is, replying to it."""
        is_thread = isinstance(channel, discord.Thread) or getattr(channel, "type", None) in (
            discord.ChannelType.public_thread,
            discord.ChannelType.private_thread,
        )
        return self._surfaces.in_channel(
            channel,  # type: ignore[arg-type]
            channel_id=channel_id,
            workspace=workspace_of(interaction.guild_id),
            thread=str(channel_id) if is_thread else "",
            reply_to=message_id,
        )


class _ClickReply:
    """Implements adapters.answers.ClickReply: the approval message redrawn through the interaction, notes only the clicker sees."""

    def __init__(self, interaction: discord.Interaction, *, budget: RateBudget, clock: Clock) -> None:
        self._interaction = interaction
        self._budget = budget
        self._clock = clock

    async def redraw(self, view: ApprovalView) -> None:
        content = render.approval_text(view)
        components = buttons.approval_view(view)
        await send_reliably(
            self._budget,
            lambda: self._interaction.edit_original_response(content=content, view=components, allowed_mentions=NO_PINGS),
            clock=self._clock,
        )

    async def tell(self, text: str) -> None:
        try:
            await send_after_answers(
                self._budget,
                lambda: self._interaction.followup.send(text, ephemeral=True, allowed_mentions=NO_PINGS),
                clock=self._clock,
            )
        except Exception:
            # Nothing left to tell the clicker with; the click's effect (if any) is recorded regardless.
            log.exception("could not answer a click")
