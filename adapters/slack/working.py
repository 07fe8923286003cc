"""The first sign of a Slack answer, shown as the question arrives: the app's status in the thread
(assistant.threads.setStatus, with loading messages), else a 👀 reaction on the question, gone when the answer ends."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Literal

from slack_sdk.errors import SlackApiError

from adapters import wording
from adapters.streaming import Clock, RateLimited
from adapters.streaming.transport import PermanentSendError

logger = logging.getLogger(__name__)

REACTION = "eyes"
LOADING_MESSAGES = wording.loading_messages()
# Refusals of setStatus that hold for the whole workspace (no chat:write / assistant:write, a token or plan
# without the method): its answers go straight to the reaction for this long (Slack seconds).
STATUS_REFUSALS = frozenset({
    "missing_scope", "not_allowed_token_type", "method_not_supported", "not_allowed", "access_denied",
    "no_permission", "team_access_not_granted",
})
REACTION_REFUSALS = frozenset({"missing_scope", "not_allowed_token_type", "no_permission", "team_access_not_granted"})
REFUSED_RETRY_S = 3600.0
# Real seconds the end of an answer waits for its sign's call still under way; past them it is given up.
SHOW_WAIT_S = 5.0

Shown = Literal["none", "status", "reaction"]


@dataclass(frozen=True, kw_only=True)
class SignPlace:
    """Where the sign goes: the answer's thread (None: a DM's top level), and the question's own message."""

    team_id: str
    channel: str
    thread_ts: str | None
    question_ts: str | None


class SlackSigns:
    """One per adapter: the workspaces that refused the status or the reaction, so their answers ask no more."""

    def __init__(self, *, web: Any, clock: Clock) -> None:
        self.web = web  # transport.SlackWeb: every call on its deadline lane (`now`), never the posting budget
        self.clock = clock
        self._refused: dict[tuple[str, str], float] = {}
        self._later: set[asyncio.Task[None]] = set()

    def take_away_later(self, team_id: str, method: str, arguments: dict[str, Any]) -> None:
        """A sign's removal its method's budget had no call for now: sent when the budget allows, beside the
        answers (their end never waits for it); a close drops what is left, as a cosmetic call."""
        async def send() -> None:
            try:
                await self.web.call(team_id, method, budget=self.web.budgets.other(team_id, method), **arguments)
            except Exception as exc:
                logger.info("could not take the working sign away in %s: %s", arguments.get("channel")
                            or arguments.get("channel_id"), exc)

        task = asyncio.get_running_loop().create_task(send())
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    async def close(self) -> None:
        tasks, self._later = set(self._later), set()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def at(self, place: SignPlace) -> WorkingSign:
        return WorkingSign(self, place)

    def allowed(self, team_id: str, what: str) -> bool:
        return self._refused.get((team_id, what), float("-inf")) <= self.clock.now()

    def refuse(self, team_id: str, what: str, error: str) -> None:
        logger.info("Slack refused the %s in %s (%s); answers there skip it for a while", what, team_id, error)
        self._refused[(team_id, what)] = self.clock.now() + REFUSED_RETRY_S


class WorkingSign:
    """One answer's sign. `show` returns at once (the call runs beside the answer); a failure costs the sign only."""

    def __init__(self, signs: SlackSigns, place: SignPlace) -> None:
        self._signs = signs
        self.place = place
        self.shown: Shown = "none"
        self._replied = False
        self._task: asyncio.Task[None] | None = None

    def show(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._show())

    def replied(self) -> None:
        """A message of the answer is in the thread: Slack has taken the status away itself."""
        self._replied = True

    async def end(self) -> None:
        """The answer ended: the reaction goes; a status still shown (nothing was posted) is cleared."""
        task = self._task
        if task is None:
            return
        await asyncio.wait({task}, timeout=SHOW_WAIT_S)
        if not task.done():
            task.cancel()  # a call that hangs is given up: the answer's end is not held for a sign
            await asyncio.wait({task})
        place, signs = self.place, self._signs
        removal: tuple[str, dict[str, Any]] | None = None
        if self.shown == "reaction":
            removal = "reactions.remove", {"channel": place.channel, "timestamp": place.question_ts, "name": REACTION}
        elif self.shown == "status" and not self._replied:
            removal = "assistant.threads.setStatus", {"channel_id": place.channel, "thread_ts": place.thread_ts,
                                                      "status": ""}
        self.shown = "none"
        if removal is None:
            return
        method, arguments = removal
        try:
            await signs.web.now(place.team_id, method, **arguments)
        except RateLimited:
            # A sign must not stay up: the removal waits for its budget (a 👀 left would say "still working").
            signs.take_away_later(place.team_id, method, arguments)
        except Exception as exc:
            logger.info("could not take the working sign away in %s: %s", place.channel, exc)

    async def _show(self) -> None:
        # `shown` is set before each call: one cut off by the end (its outcome unknown) is taken away all the same.
        if not await self._status():
            await self._reaction()

    async def _status(self) -> bool:
        place, signs = self.place, self._signs
        # A status lives in a thread; a DM's top-level answer has none, so its question gets the reaction.
        if not place.thread_ts or not signs.allowed(place.team_id, "status"):
            return False
        self.shown = "status"
        try:
            await signs.web.now(
                place.team_id, "assistant.threads.setStatus", channel_id=place.channel, thread_ts=place.thread_ts,
                status=wording.assistant_thinking(), loading_messages=list(LOADING_MESSAGES),
            )
        except Exception as exc:
            self.shown = "none"
            code = _code(exc)
            if code in STATUS_REFUSALS:
                signs.refuse(place.team_id, "status", code)
            else:
                logger.info("could not set the status in %s: %s", place.channel, exc)
            return False
        return True

    async def _reaction(self) -> bool:
        place, signs = self.place, self._signs
        if not place.question_ts or not signs.allowed(place.team_id, "reaction"):
            return False
        self.shown = "reaction"
        try:
            await signs.web.now(place.team_id, "reactions.add", channel=place.channel, timestamp=place.question_ts,
                                name=REACTION)
        except Exception as exc:
            self.shown = "none"
            code = _code(exc)
            if code in REACTION_REFUSALS:
                signs.refuse(place.team_id, "reaction", code)
            elif code != "already_reacted":  # someone's 👀 (or another answer's) is there: not ours to remove
                logger.info("could not react to the question in %s: %s", place.channel, exc)
            return False
        return True


def _code(exc: BaseException) -> str:
    """Slack's error code: SlackWeb keeps it on a permanent error, and on the SlackApiError it translated from."""
    if isinstance(exc, PermanentSendError):
        return exc.code
    for error in (exc, exc.__cause__):
        if isinstance(error, SlackApiError) and error.response is not None:
            return str(error.response.get("error") or "")
    return ""
