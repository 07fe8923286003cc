"""The /relaybot modal's "Learn from this channel": its blocks (with the channel's learning state), its reading, and its saving."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.learning.model import ChannelPlace, LearnedChannel
from core.learning.ports import ChannelLearning

LEARN_BLOCK = "learn"
SINCE_BLOCK = "learn_since"
ACTION = "value"
LEARN_OPTION = "on"
# How far back a channel is read, as the modal offers it (the CLI takes any number of days).
SINCE_CHOICES = (30, 90, 365)
DEFAULT_SINCE_DAYS = 90


@dataclass(frozen=True, kw_only=True)
class LearningWish:
    """What the admin asked for on Save: learn from the channel or not, and how far back."""

    on: bool
    since_days: int


def learning_blocks(current: LearnedChannel | None, *, default_since_days: int = DEFAULT_SINCE_DAYS) -> list[dict[str, Any]]:
    """The checkbox, how far back, and a line saying where learning stands."""
    option = {"text": _plain("Learn from this channel"), "value": LEARN_OPTION,
              "description": _plain("Its messages become a source; off deletes what was learnt from it.")}
    learn: dict[str, Any] = {"type": "checkboxes", "action_id": ACTION, "options": [option]}
    if current is not None:
        learn["initial_options"] = [option]
    since = current.since_days if current is not None else default_since_days
    days = sorted({*SINCE_CHOICES, since})
    options = [{"text": _plain(f"The last {n} days"), "value": str(n)} for n in days]
    select = {"type": "static_select", "action_id": ACTION, "options": options,
              "initial_option": next(o for o in options if o["value"] == str(since))}
    return [
        {"type": "input", "block_id": LEARN_BLOCK, "label": _plain("Learning"), "element": learn, "optional": True},
        {"type": "input", "block_id": SINCE_BLOCK, "label": _plain("How far back"), "element": select, "optional": True},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": state_line(current)}]},
    ]


def state_line(current: LearnedChannel | None) -> str:
    """Where learning from the channel stands, as the modal shows it when opened."""
    if current is None:
        return "Not learned from. DMs and group DMs never are; the bot must be a member of the channel."
    if current.state == "error":
        return f"Learning stopped: {current.error or 'an error'}"
    if current.state == "live":
        return f"Learned from: {current.done} messages of the last {current.since_days} days, kept current."
    share = f" ({100 * current.done // current.total}%)" if current.total else ""
    eta = f", about {int(current.eta_s // 60) + 1} min left" if current.eta_s else ""
    return f"Reading its history: {current.done} messages{share}{eta}."


def read_learning(values: dict[str, Any]) -> LearningWish | None:
    """The submitted choice; None when the modal showed no learning blocks."""
    learn = (values.get(LEARN_BLOCK) or {}).get(ACTION)
    if learn is None:
        return None
    on = any(o.get("value") == LEARN_OPTION for o in learn.get("selected_options") or [])
    chosen = ((values.get(SINCE_BLOCK) or {}).get(ACTION) or {}).get("selected_option") or {}
    value = str(chosen.get("value") or DEFAULT_SINCE_DAYS)
    return LearningWish(on=on, since_days=int(value) if value.isdigit() and int(value) > 0 else DEFAULT_SINCE_DAYS)


async def save_learning(learning: ChannelLearning, place: ChannelPlace, wish: LearningWish, *, by: str) -> str | None:
    """Starts, changes or stops learning as wished; the line the confirmation shows, None when nothing changed.
    LearningRefused passes through, with its sentence for the admin."""
    current = await learning.get(place)
    if not wish.on:
        if current is None:
            return None
        await learning.remove(place, by=by)
        return "learning from this channel: off (what was learnt from it is deleted)"
    if current is not None and current.since_days == wish.since_days:
        return None
    keep = current.keep_days if current is not None else None
    learned = await learning.add(place, since_days=wish.since_days, keep_days=keep, by=by)
    return f"learning from this channel: on, its last {learned.since_days} days"


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text}
