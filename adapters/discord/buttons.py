"""Approve/Reject buttons as DynamicItems whose custom_id names the continuation and call, so they work after a restart."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import discord

from adapters import wording
from core.approvals import ApprovalView

from .render import CALLS_PER_ROW, ApprovalPart, arguments_cut

CUSTOM_ID_MAX_CHARS = 100
ALL_CALLS = "*"
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# One call by index; or every undecided call: "*" alone (Reject all, and buttons drawn before
# approvals had parts), or "*<first>.<count>" for an Approve all that covers only its message's calls.
CUSTOM_ID_TEMPLATE = (
    rf"rb:(?P<verb>[ar]):(?P<continuation>{_UUID})"
    r":(?P<call>\d{1,3}|\*(?:(?P<first>\d{1,3})\.(?P<count>\d{1,3}))?)"
)
ARGUMENTS_ID_TEMPLATE = rf"rb:f:(?P<continuation>{_UUID})"
_CUSTOM_ID = re.compile(CUSTOM_ID_TEMPLATE)


@dataclass(frozen=True, kw_only=True)
class Pressed:
    """What a button decides: one call (by its index in the continuation), or every undecided call —
    of one message's part when `part` is given."""

    continuation_id: str
    approve: bool
    call_index: int | None  # None: every undecided call (of `part`, when given)
    part: ApprovalPart | None = None

    @property
    def custom_id(self) -> str:
        if self.call_index is not None:
            call = str(self.call_index)
        elif self.part is not None:
            call = f"{ALL_CALLS}{self.part.first}.{self.part.count}"
        else:
            call = ALL_CALLS
        custom_id = f"rb:{'a' if self.approve else 'r'}:{self.continuation_id}:{call}"
        assert len(custom_id) <= CUSTOM_ID_MAX_CHARS
        return custom_id

    @classmethod
    def parse(cls, custom_id: str) -> Pressed | None:
        match = _CUSTOM_ID.fullmatch(custom_id)
        return cls.from_match(match) if match else None

    @classmethod
    def from_match(cls, match: re.Match[str]) -> Pressed:
        call = match["call"]
        part = None
        if match["first"] is not None:
            part = ApprovalPart(first=int(match["first"]), count=int(match["count"]))
        return cls(
            continuation_id=match["continuation"],
            approve=match["verb"] == "a",
            call_index=None if call.startswith(ALL_CALLS) else int(call),
            part=part,
        )


class ClickHandling(Protocol):
    """What a button asks of the client's click handler (clicks.DiscordClicks); named here so buttons import no handler."""

    async def check(self, interaction: discord.Interaction) -> bool: ...

    async def on_click(self, interaction: discord.Interaction, pressed: Pressed) -> None: ...

    async def on_arguments(self, interaction: discord.Interaction, continuation_id: str) -> None: ...


class DecisionButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=CUSTOM_ID_TEMPLATE):
    """One Approve/Reject button; every click is checked and decided by the client's click handler."""

    def __init__(self, pressed: Pressed, *, label: str, disabled: bool = False, row: int | None = None) -> None:
        style = discord.ButtonStyle.success if pressed.approve else discord.ButtonStyle.danger
        button: discord.ui.Button[Any] = discord.ui.Button(
            label=label, style=style, custom_id=pressed.custom_id, disabled=disabled, row=row
        )
        super().__init__(button)
        self.pressed = pressed

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str], /
    ) -> DecisionButton:
        label = getattr(item, "label", None) or "Decide"
        return cls(Pressed.from_match(match), label=label)

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        return await _clicks(interaction).check(interaction)

    async def callback(self, interaction: discord.Interaction) -> None:
        await _clicks(interaction).on_click(interaction, self.pressed)


class ArgumentsButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=ARGUMENTS_ID_TEMPLATE):
    """"Full arguments": answers the clicker alone with every call's full arguments as a file."""

    def __init__(self, continuation_id: str, *, row: int | None = None) -> None:
        button: discord.ui.Button[Any] = discord.ui.Button(
            label=wording.full_arguments_label(), style=discord.ButtonStyle.secondary,
            custom_id=f"rb:f:{continuation_id}", row=row,
        )
        super().__init__(button)
        self.continuation_id = continuation_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str], /
    ) -> ArgumentsButton:
        return cls(match["continuation"])

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        return await _clicks(interaction).check(interaction)

    async def callback(self, interaction: discord.Interaction) -> None:
        await _clicks(interaction).on_arguments(interaction, self.continuation_id)


def _clicks(interaction: discord.Interaction) -> ClickHandling:
    # Looked up on the client at click time: the handler needs the runner and the surfaces, which
    # import this module to draw the buttons.
    handler: ClickHandling | None = getattr(interaction.client, "clicks", None)
    if handler is None:
        raise RuntimeError("the Discord client has no click handler")
    return handler


def _label(pressed: Pressed, *, calls: int, whole: bool) -> str:
    """`calls`: how many the approval has; `whole`: this message shows every one of them."""
    if pressed.call_index is None:
        if not pressed.approve:
            return "Reject all" if whole else f"Reject all {calls}"
        count = pressed.part.count if pressed.part is not None else calls
        return "Approve all" if whole else f"Approve all (these {count})"
    verb = "Approve" if pressed.approve else "Reject"
    return f"{verb} {pressed.call_index + 1}" if calls > 1 else verb


def approval_view(view: ApprovalView, part: ApprovalPart) -> discord.ui.View:
    """The buttons of one approval message: Approve/Reject for each of its calls (decided ones disabled);
    Approve all for its own calls only; Reject all for every undecided call; Full arguments when some
    arguments were cut. All disabled once the approval is closed."""
    components = discord.ui.View(timeout=None)
    calls = len(view.calls)
    indexes = [index for index in part.indexes if 0 <= index < calls]
    whole = len(indexes) == calls
    closed = view.state != "open"
    for position, index in enumerate(indexes):
        call = view.calls[index]
        for approve in (True, False):
            pressed = Pressed(continuation_id=view.continuation_id, approve=approve, call_index=index)
            disabled = closed or call.call_id in view.decisions
            label = _label(pressed, calls=calls, whole=whole)
            components.add_item(DecisionButton(pressed, label=label, disabled=disabled, row=position // CALLS_PER_ROW))
    row = -(-len(indexes) // CALLS_PER_ROW)
    if len(indexes) > 1:
        # Only the calls this message shows: nobody approves a call they were not shown.
        pressed = Pressed(continuation_id=view.continuation_id, approve=True, call_index=None, part=part)
        undecided_here = any(view.calls[index].call_id not in view.decisions for index in indexes)
        label = _label(pressed, calls=calls, whole=whole)
        components.add_item(DecisionButton(pressed, label=label, disabled=closed or not undecided_here, row=row))
    if calls > 1:
        # Rejecting what one has not seen runs nothing, so Reject all may cover every message's calls.
        pressed = Pressed(continuation_id=view.continuation_id, approve=False, call_index=None)
        label = _label(pressed, calls=calls, whole=whole)
        components.add_item(DecisionButton(pressed, label=label, disabled=closed or not view.undecided, row=row))
    if arguments_cut(view, part):
        components.add_item(ArgumentsButton(view.continuation_id, row=row))
    return components


def part_of_message(continuation_id: str, custom_ids: Iterable[str]) -> ApprovalPart | None:
    """Which calls a posted approval message shows, read back from its buttons; None when they do not say
    (a message drawn before approvals had parts, without per-call buttons)."""
    indexes: list[int] = []
    for custom_id in custom_ids:
        pressed = Pressed.parse(custom_id)
        if pressed is None or pressed.continuation_id != continuation_id:
            continue
        if pressed.part is not None:
            return pressed.part
        if pressed.call_index is not None:
            indexes.append(pressed.call_index)
    if not indexes:
        return None
    return ApprovalPart(first=min(indexes), count=max(indexes) - min(indexes) + 1)


def custom_ids_of(message: discord.Message) -> list[str]:
    """The custom_ids of a message's buttons."""
    found: list[str] = []
    for row in message.components:
        for child in getattr(row, "children", ()):
            custom_id = getattr(child, "custom_id", None)
            if custom_id:
                found.append(custom_id)
    return found

def team_of(interaction: discord.Interaction) -> str | None:
    """The guild a click comes from, as the approvals name teams (`discord:G1`): another guild's approval is not found
    from it. None in a DM, where an asker's private approvals wait whatever guild they came from."""
    return f"discord:{interaction.guild_id}" if interaction.guild_id else None
