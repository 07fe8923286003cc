"""Approval clicks: answer within 3 s, decide through the engine (policy checked on every click),
edit the approval message, and stream the resumed run into the thread."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import discord

from adapters import wording as shared_wording
from adapters.approval_flow import ClickReplies, handle_click
from adapters.streaming import Clock
from core import wording as core_wording
from core.engine import Engine
from core.events import Event
from core.store.continuations import ContinuationRow

from . import rendering, wording
from .answer import AnswerPlace, AnswerStreams
from .approvals import ButtonTarget, approval_view
from .gate import Gate, actor_of, workspace_of
from .transport import NO_PINGS, ChannelBudgets, ChannelTransport, send_reliably

log = logging.getLogger(__name__)


class ClickHandler:
    """Handles every Approve/Reject click, including clicks on buttons posted before a restart."""

    def __init__(
        self, *, engine: Engine, streams: AnswerStreams, budgets: ChannelBudgets, gate: Gate, clock: Clock
    ) -> None:
        self._engine = engine
        self._streams = streams
        self._budgets = budgets
        self._gate = gate
        self._clock = clock
        # Edits of one approval message are serialised, so a stale view never lands last.
        self._edit_locks: dict[int, asyncio.Lock] = {}

    async def check(self, interaction: discord.Interaction) -> bool:
        """Run on every click before the callback; a refusal is always answered."""
        if not self._gate.accepting:
            await interaction.response.send_message(wording.shutting_down(), ephemeral=True)
            return False
        if not self._gate.allows_guild(interaction.guild_id):
            await interaction.response.send_message(core_wording.approval_not_found(), ephemeral=True)
            return False
        return True

    async def handle(self, interaction: discord.Interaction, target: ButtonTarget) -> None:
        # A deferred update answers within Discord's 3 s; the message is edited afterwards.
        await interaction.response.defer()
        try:
            await self._decide(interaction, target)
        except Exception:
            log.exception("approval click failed")
            await self._tell(interaction, shared_wording.click_failed())

    async def _decide(self, interaction: discord.Interaction, target: ButtonTarget) -> None:
        actor = actor_of(interaction.user, permissions=interaction.permissions if interaction.guild_id else None)
        row = await self._engine.continuations.get(uuid.UUID(target.continuation_id))
        call_id: str | None = None
        if row is not None and target.call_index is not None:
            call_id = row.call_ids[target.call_index] if target.call_index < len(row.call_ids) else None
        if row is None or (target.call_index is not None and call_id is None):
            await self._tell(interaction, core_wording.approval_not_found())
            return
        replies = ClickReplies(
            show=lambda _row: self._show_decisions(interaction, target.continuation_id),
            tell=lambda text: self._tell(interaction, text),
            stream=lambda events: self._stream_resumed(interaction, events),
        )
        await handle_click(
            self._engine, continuation_id=target.continuation_id, call_id=call_id, approved=target.approve,
            actor=actor, replies=replies,
        )

    async def _show_decisions(self, interaction: discord.Interaction, continuation_id: str) -> None:
        message = interaction.message
        if message is None:
            return
        lock = self._edit_locks.setdefault(message.id, asyncio.Lock())
        async with lock:
            # Read inside the lock: the edit shows every decision recorded so far.
            row = await self._engine.continuations.get(uuid.UUID(continuation_id))
            if row is None:
                return
            content = rendering.decided_text(_base_text(row, message), call_ids=row.call_ids, decisions=row.decisions)
            decided = [index for index, call_id in enumerate(row.call_ids) if call_id in row.decisions]
            view = approval_view(continuation_id, len(row.call_ids), decided=decided)
            budget = self._budgets(message.channel.id)
            await send_reliably(
                budget,
                lambda: interaction.edit_original_response(content=content, view=view, allowed_mentions=NO_PINGS),
                clock=self._clock,
            )

    async def _stream_resumed(self, interaction: discord.Interaction, events: AsyncIterator[Event]) -> None:
        channel = interaction.channel
        message = interaction.message
        if channel is None or message is None:
            await events.aclose()  # type: ignore[attr-defined]
            return
        channel_id = interaction.channel_id or message.channel.id
        is_thread = isinstance(channel, discord.Thread) or getattr(channel, "type", None) in (
            discord.ChannelType.public_thread,
            discord.ChannelType.private_thread,
        )
        place = AnswerPlace(
            transport=ChannelTransport(channel, reply_to=message.id),  # type: ignore[arg-type]
            channel=channel,  # type: ignore[arg-type]
            channel_id=channel_id,
            workspace=workspace_of(interaction.guild_id),
            thread=str(channel_id) if is_thread else "",
        )
        await self._streams.run(events, place)

    async def _tell(self, interaction: discord.Interaction, text: str) -> None:
        """An ephemeral answer to the clicker only."""
        try:
            budget = self._budgets(interaction.channel_id or 0)
            await send_reliably(
                budget,
                lambda: interaction.followup.send(text, ephemeral=True, allowed_mentions=NO_PINGS),
                clock=self._clock,
            )
        except Exception:
            log.exception("could not answer a click")


def _base_text(row: ContinuationRow, message: discord.Message) -> str:
    for ref in row.message_refs:
        if ref.get("message_id") == str(message.id) and isinstance(ref.get("text"), str):
            return str(ref["text"])
    return message.content

