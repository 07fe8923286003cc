"""Approval clicks: answered within 3 s, decided by engine.approvals in one call, shown by the shared runner."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Awaitable, Callable

import discord

from adapters import wording
from adapters.answers import AnswerRunner
from adapters.gate import Gate
from adapters.streaming import Clock, RateBudget
from core import wording as engine_wording
from core.approvals import ApprovalService, ApprovalView, Click

from . import buttons, render
from .buttons import Pressed, team_of
from .inbound import DiscordAccess, actor_of, guild_of, workspace_of
from .render import ApprovalPart
from .surface import DiscordSurface, DiscordSurfaces, edit_approval
from . import transport_calls as calls
from .transport import NO_PINGS
from .wording import mention

log = logging.getLogger(__name__)

# How far around a clicked approval message its other messages (parts) are looked for.
PART_SCAN_MESSAGES = 50

RedrawParts = Callable[[], Awaitable[None]]


class DiscordClicks:
    """Handles every Approve/Reject/Full arguments click, including clicks on buttons posted before a restart."""

    def __init__(
        self,
        *,
        approvals: ApprovalService,
        runner: AnswerRunner,
        surfaces: DiscordSurfaces,
        gate: Gate,
        access: DiscordAccess,
    ) -> None:
        self._approvals = approvals
        self._runner = runner
        self._surfaces = surfaces
        self._gate = gate
        self._access = access
        # One redraw of an approval's other messages at a time, each reading the latest decisions.
        self._part_locks: dict[str, asyncio.Lock] = {}

    async def check(self, interaction: discord.Interaction) -> bool:
        """Run on every click before the callback; a refusal is always answered."""
        if not self._gate.accepting:
            await calls.respond(interaction, wording.shutting_down())
            return False
        if not self._gate.allows(guild_of(interaction.guild_id)):
            # Said as if the approval did not exist: a guild outside the allow-list learns nothing of it.
            await calls.respond(interaction, engine_wording.approval_not_found())
            return False
        return True

    async def on_click(self, interaction: discord.Interaction, pressed: Pressed) -> None:
        """An Approve/Reject button: acknowledged at once, then decided."""
        with self._gate.track():
            # A deferred update answers within Discord's 3 s; the message is edited afterwards.
            await calls.acknowledge(interaction)
            channel_id = interaction.channel_id or (interaction.message.channel.id if interaction.message else 0)
            budget = self._surfaces.budgets(channel_id)
            reply = _ClickReply(interaction, pressed=pressed, budget=budget, clock=self._surfaces.clock)
            try:
                message, channel = interaction.message, interaction.channel
                if message is None or channel is None:
                    raise RuntimeError("a button click without its message or channel")
                if await self._refused_in_dm(interaction, reply):
                    return
                if not _shown_to_clicker(interaction, pressed.continuation_id):
                    await reply.tell(engine_wording.approval_not_found())
                    return
                # Built before the click: once it claims the run, nothing may stop the run from being shown.
                surface = self._resumed_surface(interaction, channel, message_id=message.id, channel_id=channel_id)
                reply.shown = buttons.part_of_message(pressed.continuation_id, buttons.custom_ids_of(message))
                reply.redraw_parts = lambda: self._redraw_parts(interaction, message, pressed.continuation_id, budget)
                result = await self._approvals.click(await self._click_of(pressed, interaction, reply.shown))
                await self._runner.settle_click(result, reply, surface, message_key=str(message.id))
            except Exception:
                log.exception("approval click failed")
                await reply.tell(wording.click_failed())

    async def on_arguments(self, interaction: discord.Interaction, continuation_id: str) -> None:
        """"Full arguments": every call's arguments as a JSON file only the clicker sees."""
        with self._gate.track():
            # Deferred first: reading the approval may take longer than Discord's 3 s.
            await calls.acknowledge(interaction, ephemeral=True, thinking=True)
            channel_id = interaction.channel_id or 0
            reply = _ClickReply(
                interaction, pressed=None, budget=self._surfaces.budgets(channel_id), clock=self._surfaces.clock
            )
            try:
                if await self._refused_in_dm(interaction, reply):
                    return
                if not _shown_to_clicker(interaction, continuation_id):
                    await reply.tell(engine_wording.approval_not_found())
                    return
                view = await self._approvals.view(continuation_id, team=team_of(interaction))
                if view is None:
                    await reply.tell(engine_wording.approval_not_found())
                    return
                await reply.attach(
                    wording.full_arguments_attached(len(view.calls)), render.full_arguments_file(view),
                    filename=f"arguments-{continuation_id[:8]}.json",
                )
            except Exception:
                log.exception("could not show the full arguments of approval %s", continuation_id)
                await reply.tell(wording.click_failed())

    async def _refused_in_dm(self, interaction: discord.Interaction, reply: _ClickReply) -> bool:
        """In a DM, the DM rule decides who may click, as it decides who may ask."""
        if interaction.guild_id is not None:
            return False
        refusal = await self._access.refusal(interaction.user.id)
        if refusal is None:
            return False
        await reply.tell(refusal)
        return True

    async def _click_of(self, pressed: Pressed, interaction: discord.Interaction, shown: ApprovalPart | None) -> Click:
        """The decision a pressed button asks for."""
        team = team_of(interaction)
        among = await self._shown_call_ids(pressed, shown, team) if pressed.call_index is None and pressed.approve else None
        return Click(
            continuation_id=pressed.continuation_id, call_index=pressed.call_index, approved=pressed.approve, among=among,
            actor=actor_of(interaction.user, permissions=interaction.permissions if interaction.guild_id else None),
            mention=mention, team=team,
        )

    async def _shown_call_ids(self, pressed: Pressed, shown: ApprovalPart | None, team: str | None) -> tuple[str, ...]:
        """The calls an Approve all covers: those of its own message, never one the clicker was not shown."""
        view = await self._approvals.view(pressed.continuation_id, team=team)
        if view is None:
            return ()
        part = pressed.part or shown or render.approval_parts(view.calls)[0]
        return tuple(view.calls[index].call_id for index in part.indexes if 0 <= index < len(view.calls))

    async def _redraw_parts(
        self, interaction: discord.Interaction, clicked: discord.Message, continuation_id: str, budget: RateBudget
    ) -> None:
        """Redraws the approval's other messages (a Reject all decided their calls too, or the approval closed)."""
        channel, me = interaction.channel, interaction.client.user
        if channel is None or me is None or not hasattr(channel, "history"):
            return
        lock = self._part_locks.setdefault(continuation_id, asyncio.Lock())
        try:
            async with lock:
                view = await self._approvals.view(continuation_id, team=team_of(interaction))
                if view is None:
                    return
                found = await calls.read_history(
                    channel, limit=PART_SCAN_MESSAGES, around=clicked, budget=self._surfaces.budgets.global_budget,  # type: ignore[arg-type]
                )
                for other in found:
                    if other.id == clicked.id or other.author.id != me.id:
                        continue
                    part = buttons.part_of_message(continuation_id, buttons.custom_ids_of(other))
                    if part is not None:
                        await edit_approval(other, view, part, budget=budget, clock=self._surfaces.clock)
        except Exception:
            # The clicked message shows the decision; the others catch up at the next click or expiry.
            log.exception("could not redraw the other messages of approval %s", continuation_id)
        finally:
            if not lock.locked() and self._part_locks.get(continuation_id) is lock:
                del self._part_locks[continuation_id]

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


def _shown_to_clicker(interaction: discord.Interaction, continuation_id: str) -> bool:
    """Whether the clicker may see the approval's channel: the click's channel permissions (computed by Discord
    for this member there) include View Channel. discord.py only routes a custom_id the clicked message carries,
    so the message is the approval's own; a member who cannot view its channel (a hand-made request naming it,
    a permission revoked since) decides nothing and reads no arguments, told as if the approval did not exist."""
    return interaction.guild_id is None or interaction.permissions.view_channel


class _ClickReply:
    """Implements adapters.answers.ClickReply: the approval message redrawn through the interaction, notes only the clicker sees."""

    def __init__(
        self, interaction: discord.Interaction, *, pressed: Pressed | None, budget: RateBudget, clock: Clock
    ) -> None:
        self._interaction = interaction
        self._pressed = pressed
        self._budget = budget
        self._clock = clock
        self.shown: ApprovalPart | None = None  # the calls the clicked message shows, read from its buttons
        self.redraw_parts: RedrawParts | None = None

    async def redraw(self, view: ApprovalView) -> None:
        part = self._part(view)
        content = render.approval_text(view, part)
        components = buttons.approval_view(view, part)
        await calls.update_original_paced(
            self._interaction, budget=self._budget, clock=self._clock, content=content, view=components,
            allowed_mentions=NO_PINGS,
        )
        if self.redraw_parts is not None and self._others_changed(view, part):
            await self.redraw_parts()

    async def tell(self, text: str) -> None:
        try:
            await calls.followup(
                self._interaction, text, budget=self._budget, clock=self._clock, ephemeral=True, allowed_mentions=NO_PINGS
            )
        except Exception:
            # Nothing left to tell the clicker with; the click's effect (if any) is recorded regardless.
            log.exception("could not answer a click")

    async def attach(self, text: str, data: bytes, *, filename: str) -> None:
        """A private note with a file (a fresh one per attempt: a sent file is consumed)."""
        await calls.followup(
            self._interaction, text, budget=self._budget, clock=self._clock, ephemeral=True, allowed_mentions=NO_PINGS,
            file=lambda: discord.File(io.BytesIO(data), filename=filename),
        )

    def _part(self, view: ApprovalView) -> ApprovalPart:
        if self.shown is not None:
            return self.shown
        pressed = self._pressed
        if pressed is not None and pressed.call_index is not None:
            return render.part_containing(view.calls, pressed.call_index)
        if pressed is not None and pressed.part is not None:
            return pressed.part
        return render.approval_parts(view.calls)[0]

    def _others_changed(self, view: ApprovalView, part: ApprovalPart) -> bool:
        """Whether the approval's other messages show something out of date after this click."""
        if part.first == 0 and part.count >= len(view.calls):
            return False
        reject_all = self._pressed is not None and self._pressed.call_index is None and not self._pressed.approve
        return reject_all or view.state != "open"
