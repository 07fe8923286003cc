"""Private answers on Discord: only the asker sees the answer, its sources and notices; its approval waits in their DMs.

An answer streams into the interaction's ephemeral response (transport_private.py). Its sources and notices are
ephemeral followups. An approval cannot be an ephemeral message: Discord lets the bot edit one for the token's
15 minutes only (expiry could not close its buttons), and a click on it would resume the run where the channel
sees it; so the request is posted in the asker's DMs, where the asker (who may always decide their own request)
clicks it and the resumed answer streams, and the private answer says so. The answer's records (repair, the
outbox) are kept under the asker's DM channel, so nothing a crash leaves behind is ever posted in the channel;
its calls draw on the channel's budget, as a public /ask's webhook calls do."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import discord

from adapters import wording
from core.approvals import ApprovalView
from core.citations import Citation

from . import render
from .inbound import DiscordAccess
from .surface import DiscordSurface, DiscordSurfaces
from .transport import fresh_nonce, send_reliably
from .transport_private import PrivateTransport, open_dm

log = logging.getLogger(__name__)


# The sentence a click in the asker's DMs would be refused with (DiscordAccess.refusal), or None when it may click.
DmRefusal = Callable[[], Awaitable[str | None]]


class ApprovalUnreachable(Exception):
    """A private answer's approval cannot be decided where it would be posted: the run is withdrawn."""


class PrivateSurface(DiscordSurface):
    """A DiscordSurface whose messages only the asker sees: the answer through a PrivateTransport, its approval
    in their DMs (the surface's channel), everything else beside the answer."""

    def __init__(self, *, transport: PrivateTransport, dm: discord.DMChannel, dm_refusal: DmRefusal, **fields: Any) -> None:
        super().__init__(transport=transport, channel=dm, **fields)
        self.private = transport
        self._dm_id = dm.id
        self._dm_refusal = dm_refusal
        # Recorded under the DM channel (repair, the outbox): what a crash leaves is finished there, never in public.
        self.place = replace(self.place, channel=str(dm.id))

    async def show_sources(self, citations: tuple[Citation, ...], answer_ids: list[str]) -> None:
        embed = render.sources_embed(citations)
        if embed is None:
            return
        nonce = fresh_nonce()
        await send_reliably(self._budget, lambda: self.private.note(embed=embed, nonce=nonce), clock=self._clock)

    async def show_notice(self, text: str) -> None:
        nonce = fresh_nonce()
        await send_reliably(self._budget, lambda: self.private.note(text, nonce=nonce), clock=self._clock)

    async def show_approval(self, view: ApprovalView) -> dict[str, Any]:
        if await self._dm_refusal() is not None:
            # Its buttons would be refused in the DMs (DIRECT_MESSAGES): nothing must wait where nobody may decide.
            await self.show_notice(wording.private_approval_dms_refused())
            raise ApprovalUnreachable("a private answer's approval would be refused in the asker's DMs")
        ref = await super().show_approval(view)
        ref["channel_id"] = str(self._dm_id)  # where expiry finds it (the surface's own channel id is the budget's)
        try:
            await self.show_notice(wording.private_approval_in_dm())
        except Exception:
            # The request is posted and clickable in the DMs; only the pointer to it is missing.
            log.exception("could not tell the asker that a private answer's approval is in their DMs")
        return ref


class PrivateAnswers:
    """Makes the surface of each private answer; they share the channel budgets, limits and clock of every answer."""

    def __init__(self, surfaces: DiscordSurfaces, access: DiscordAccess) -> None:
        self._surfaces = surfaces
        self._access = access
        self._background: set[asyncio.Task[None]] = set()  # unused: a private answer shows no typing

    async def surface(
        self, interaction: discord.Interaction, *, workspace: str, thread: str, preface: str | None = None,
    ) -> PrivateSurface:
        """The private surface of a deferred (ephemeral) interaction, `preface` shown before the answer. Raises when
        the asker's DM channel cannot be opened: without it nothing could carry the answer past 15 minutes."""
        dm = await open_dm(interaction.user)
        user_id = interaction.user.id
        transport = PrivateTransport(interaction, dm=dm, moved_sentence=wording.private_moved_to_dm())
        surfaces = self._surfaces
        if preface is not None:
            budget = surfaces.budgets(interaction.channel_id or dm.id)
            await send_reliably(budget, lambda: transport.preface(preface), clock=surfaces.clock)
        # The interaction's webhook calls count with the channel's messages (as a public /ask's do): its budget.
        # The DM channel is where its records are kept and its approval goes.
        return PrivateSurface(
            transport=transport, dm=dm, channel_id=interaction.channel_id or dm.id, workspace=workspace, thread=thread,
            budgets=surfaces.budgets, limits=surfaces.limits, clock=surfaces.clock, show_typing=False,
            background=self._background, feedback=surfaces.feedback,
            dm_refusal=lambda: self._access.refusal(user_id),
        )
