"""What a platform implements for the shared answer runner: its surface and optional controls, the reply to a click,
reading back what a crash left, and delivering kept finals."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from adapters.streaming import Clock, MessageTransport, RateBudget, StreamLimits
from core.approvals import ApprovalView
from core.citations import Citation
from core.ports import LiveMessage, PendingFinal


@dataclass(frozen=True, kw_only=True)
class AnswerPlace:
    """Where an answer's messages live, as recorded while they stream."""

    platform: str
    workspace: str
    channel: str
    thread: str = ""


@dataclass(frozen=True, kw_only=True)
class Pacing:
    """How one answer streams: message limits and the rate budgets its posts and edits draw on."""

    limits: StreamLimits
    edit_budget: RateBudget
    post_budget: RateBudget
    clock: Clock
    key: Hashable = None  # the streamer's fairness key in shared budgets; None: one per answer
    start_on_first_event: bool = False  # post nothing until the engine says something
    # The answer's age in every budget queue: when its question was asked or taken (on its platform's clock,
    # streaming/answer_place.asked_at), so a question that waited for its turn (ANSWERS_IN_FLIGHT_MAX) keeps its place;
    # None: when the answer starts playing.
    since: float | None = None
    # Another sign already shows the answer is coming (Slack's thread status or 👀): the placeholder waits longer.
    sign_shown: Callable[[], bool] | None = None


class Surface(MessageTransport, Protocol):
    """A platform's end of one answer: posting and editing its messages, and what goes around them."""

    place: AnswerPlace
    pacing: Pacing

    async def show_working(self) -> None:
        """The first sign of life, before any message (Discord's typing indicator; nothing where a placeholder does it)."""
        ...

    async def show_approval(self, view: ApprovalView) -> dict[str, Any]:
        """Posts the approval message and returns the reference expiry will need to edit it."""
        ...

    async def show_sources(self, citations: tuple[Citation, ...], answer_ids: list[str]) -> None:
        """The sources the answer cites, under its numbers (ascending); called only when it cites some."""
        ...

    async def show_notice(self, text: str) -> None:
        """A short message in the answer's place (thread, DM or channel)."""
        ...


@runtime_checkable
class AnswerControls(Protocol):
    """Optional on a Surface, whole or not at all (the runner checks `isinstance(surface, AnswerControls)`): the Stop
    button while an answer streams, and 👍/👎 under a final answer.

    Slack puts Stop on each live update of the message being written and 👍/👎 on the final text of the last one
    (blocks beside the text); a native stream takes no blocks while it streams, so it carries no Stop button: its
    run is recorded for the "Stop this answer" message shortcut instead. Discord puts Stop on the answer's first
    message as a component, which the final edit drops, and 👍/👎 on its last message by an edit after the final."""

    async def show_stop(self, run_id: str) -> None:
        """The run is going: offer its Stop button (its custom id or value names `run_id`)."""
        ...

    async def end_stop(self) -> None:
        """The final text is about to go: edits from now on drop the Stop button."""
        ...

    async def clear_stop(self) -> None:
        """The answer ended: no Stop button is left anywhere (what the final edit did not drop)."""
        ...

    async def will_finish(self, run_id: str) -> None:
        """The run is done and its final text is about to go (Slack's final texts then carry 👍/👎)."""
        ...

    async def show_feedback(self, run_id: str, answer_ids: list[str]) -> None:
        """👍/👎 under the final answer of turn `run_id`."""
        ...


class ApprovalMessages(Protocol):
    """What the runner asks of the approval service (core.approvals.ApprovalService)."""

    async def remember_message(self, continuation_id: str, ref: dict[str, Any]) -> None: ...

    async def withdraw(self, continuation_id: str) -> bool: ...

    async def view(self, continuation_id: str) -> ApprovalView | None: ...


class ClickReply(Protocol):
    """How a platform answers the person who clicked."""

    async def redraw(self, view: ApprovalView) -> None:
        """Edits the clicked approval message to show `view`."""
        ...

    async def tell(self, text: str) -> None:
        """A private note to the clicker."""
        ...


class ShownMessages(Protocol):
    """Reads and rewrites a platform message as shown (rendered text), to repair what a crash left."""

    max_chars: int

    def render(self, markdown: str) -> str: ...

    async def read_shown(self, message: LiveMessage) -> str | None: ...

    async def replace_shown(self, message: LiveMessage, text: str) -> None: ...


@runtime_checkable
class PostFinder(Protocol):
    """Optional on ShownMessages (repair checks `isinstance(shown, PostFinder)`): finds the message a post recorded
    before it was sent may have made (its key `answer id:part`, read from `since`, epoch seconds), so crash repair
    finishes a message whose reply nobody saw."""

    async def find_post(self, message: LiveMessage, key: str, *, since: float) -> str | None: ...


class FinalDelivery(Protocol):
    """Delivers a kept final's parts on a platform, after the process that started it could not."""

    async def post_part(self, final: PendingFinal, index: int, text: str) -> str:
        """Posts part `index` unless the platform already shows it (marked with the answer id): no part twice."""
        ...

    async def edit_part(self, final: PendingFinal, message_id: str, text: str) -> None: ...


class PartFinder(Protocol):
    """Finds a part whose post was attempted without its outcome seen (Slack: by its metadata, read from the
    attempt on). A platform whose posts are idempotent by themselves (Discord's nonce) needs none."""

    async def find_part(self, final: PendingFinal, index: int, *, since: float) -> str | None: ...
