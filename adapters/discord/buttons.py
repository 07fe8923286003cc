"""Approve/Reject buttons as DynamicItems whose custom_id names the continuation and call, so they work after a restart."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

import discord

from core.approvals import ApprovalView

CUSTOM_ID_MAX_CHARS = 100
ALL_CALLS = "*"
# Two calls' Approve/Reject pairs a row, four rows, and a fifth row for Approve all/Reject all:
# more calls than that get only the all-buttons.
CALLS_PER_ROW = 2
MAX_PER_CALL_ROWS = 4
CUSTOM_ID_TEMPLATE = (
    r"rb:(?P<verb>[ar]):(?P<continuation>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r":(?P<call>\d{1,3}|\*)"
)
_CUSTOM_ID = re.compile(CUSTOM_ID_TEMPLATE)


@dataclass(frozen=True, kw_only=True)
class ButtonTarget:
    """What a button decides: one call (by its index in the continuation) or all of them."""

    continuation_id: str
    approve: bool
    call_index: int | None  # None: every undecided call

    @property
    def custom_id(self) -> str:
        call = ALL_CALLS if self.call_index is None else str(self.call_index)
        custom_id = f"rb:{'a' if self.approve else 'r'}:{self.continuation_id}:{call}"
        assert len(custom_id) <= CUSTOM_ID_MAX_CHARS
        return custom_id

    @classmethod
    def parse(cls, custom_id: str) -> ButtonTarget | None:
        match = _CUSTOM_ID.fullmatch(custom_id)
        return cls.from_match(match) if match else None

    @classmethod
    def from_match(cls, match: re.Match[str]) -> ButtonTarget:
        call = match["call"]
        return cls(
            continuation_id=match["continuation"],
            approve=match["verb"] == "a",
            call_index=None if call == ALL_CALLS else int(call),
        )


class ClickHandling(Protocol):
    """What a button asks of the client's click handler (clicks.DiscordClicks); named here so buttons import no handler."""

    async def check(self, interaction: discord.Interaction) -> bool: ...

    async def handle(self, interaction: discord.Interaction, target: ButtonTarget) -> None: ...


class DecisionButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=CUSTOM_ID_TEMPLATE):
    """One Approve/Reject button; every click is checked and decided by the client's click handler."""

    def __init__(self, target: ButtonTarget, *, label: str, disabled: bool = False, row: int | None = None) -> None:
        style = discord.ButtonStyle.success if target.approve else discord.ButtonStyle.danger
        button: discord.ui.Button[Any] = discord.ui.Button(
            label=label, style=style, custom_id=target.custom_id, disabled=disabled, row=row
        )
        super().__init__(button)
        self.target = target

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str], /
    ) -> DecisionButton:
        label = getattr(item, "label", None) or "Decide"
        return cls(ButtonTarget.from_match(match), label=label)

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        return await _clicks(interaction).check(interaction)

    async def callback(self, interaction: discord.Interaction) -> None:
        await _clicks(interaction).handle(interaction, self.target)


def _clicks(interaction: discord.Interaction) -> ClickHandling:
    # Looked up on the client at click time: the handler needs the runner and the surfaces, which
    # import this module to draw the buttons.
    handler: ClickHandling | None = getattr(interaction.client, "clicks", None)
    if handler is None:
        raise RuntimeError("the Discord client has no click handler")
    return handler


def _label(target: ButtonTarget, calls: int) -> str:
    if target.call_index is None:
        return "Approve all" if target.approve else "Reject all"
    verb = "Approve" if target.approve else "Reject"
    return f"{verb} {target.call_index + 1}" if calls > 1 else verb


def approval_view(view: ApprovalView) -> discord.ui.View:
    """Approve/Reject per call (decided ones disabled), plus Approve all/Reject all for several; all disabled once closed."""
    components = discord.ui.View(timeout=None)
    calls = len(view.calls)
    closed = view.state != "open"
    per_call = calls <= MAX_PER_CALL_ROWS * CALLS_PER_ROW
    if per_call:
        for index, call in enumerate(view.calls):
            for approve in (True, False):
                target = ButtonTarget(continuation_id=view.continuation_id, approve=approve, call_index=index)
                disabled = closed or call.call_id in view.decisions
                row = index // CALLS_PER_ROW
                components.add_item(DecisionButton(target, label=_label(target, calls), disabled=disabled, row=row))
    if calls > 1 or not per_call:
        all_decided = closed or not view.undecided
        row = -(-calls // CALLS_PER_ROW) if per_call else 0
        for approve in (True, False):
            target = ButtonTarget(continuation_id=view.continuation_id, approve=approve, call_index=None)
            components.add_item(DecisionButton(target, label=_label(target, calls), disabled=all_decided, row=row))
    return components
