"""Slack's Stop button and 👍/👎 on the answer's own messages (the blocks each post and edit carries), the Stop
message of a native stream, and Stop clicks."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

from slack_bolt.async_app import AsyncAck

from adapters import wording as shared_wording
from adapters.gate import Gate
from adapters.streaming import Priority
from adapters.streaming.transport import LiveText
from core.requests import Actor

from . import wording
from .buttons import read_click
from .feedback import FEEDBACK_ACTION, feedback_blocks, parse_value
from .render import markdown_text
from .transport import post_metadata

# The surface builds these, so this module imports neither it nor inbound: `surfaces` is a
# surface.SlackSurfaces, `target` a surface.ReplyTarget, `access` an inbound.SlackAccess.

logger = logging.getLogger(__name__)

STOP_ACTION = "relaybot_stop"
STOP_LABEL = "⏹ Stop"
STOP_FALLBACK = "⏹ Stop this answer"
# Real seconds a natively streamed answer goes on before its Stop message is posted (quick answers need none).
STOP_AFTER_S = 1.0
# Slack seconds between tries for that post while the channel's post budget has no call to spare at once.
STOP_RETRY_S = 1.0


def stop_blocks(run_id: str) -> list[dict[str, Any]]:
    """One button whose value is the run id: all a click needs, in whichever process it lands."""
    return [{
        "type": "actions", "block_id": f"stop-{run_id[:8]}",
        "elements": [{
            "type": "button", "action_id": STOP_ACTION, "style": "danger", "value": run_id,
            "text": {"type": "plain_text", "text": STOP_LABEL},
        }],
    }]


def run_of(message: dict[str, Any]) -> str | None:
    """The run an answer message's buttons name (its Stop button, or its 👍/👎), or None."""
    for block in message.get("blocks") or ():
        for element in block.get("elements") or () if isinstance(block, dict) else ():
            if not isinstance(element, dict):
                continue
            if element.get("action_id") == STOP_ACTION and element.get("value"):
                return str(element["value"])
            if element.get("action_id") == FEEDBACK_ACTION:
                parsed = parse_value(str((element.get("positive_button") or {}).get("value") or ""))
                if parsed is not None:
                    return parsed[1]
    return None


def answer_content(
    text: str, *, stop: str | None = None, feedback: str | None = None, whole: bool = False,
) -> dict[str, Any]:
    """One answer message as Slack is sent it: its Markdown alone (`markdown_text`), or, with a button, a
    `markdown` block (Slack renders it as `markdown_text`; 12,000 characters, far above the 4,000 an answer
    message holds) and the buttons under it, with the same text as the notification's fallback.

    `whole`: the message may carry blocks already (a button it was sent with): it is sent as blocks even
    without a button, since an edit that names no blocks may leave a message's old ones in place."""
    return shown_as(markdown_text(text), buttons=stop_blocks(stop) if stop else feedback_blocks(feedback) if feedback else [],
                    whole=whole)


def shown_as(rendered: str, *, buttons: list[dict[str, Any]], whole: bool) -> dict[str, Any]:
    """The arguments that show `rendered` (Markdown as Slack is sent it) with `buttons` under it."""
    if not buttons and not whole:
        return {"markdown_text": rendered}
    return {"text": rendered, "blocks": [{"type": "markdown", "text": rendered}, *buttons]}


class AnswerButtons:
    """The buttons of one answer's messages: Stop on the message being written (a live update) while the run
    goes on; 👍/👎 on the final text once the answer is done, only on its last message (a final laid over
    several messages is given them on each as it goes, and the earlier ones lose them again in `show_feedback`)."""

    def __init__(self) -> None:
        self.stop: str | None = None  # the run whose Stop live updates carry
        self.feedback: str | None = None  # the run whose 👍/👎 final texts carry
        self.with_feedback: dict[str, str] = {}  # message → the text it was last sent with 👍/👎
        self.shown: dict[str, str] = {}  # message → the text it was last sent
        self.blocked: set[str] = set()  # messages once sent with blocks: sent whole from then on

    def content(self, message_id: str | None, text: str) -> dict[str, Any]:
        live = isinstance(text, LiveText)
        return answer_content(text, stop=self.stop if live else None, feedback=None if live else self.feedback,
                              whole=message_id in self.blocked)

    def sent(self, message_id: str, text: str, content: dict[str, Any]) -> None:
        """What a post or an edit that arrived carried."""
        self.shown[message_id] = text
        if content.get("blocks"):
            self.blocked.add(message_id)
        if any(block.get("type") == "context_actions" for block in content.get("blocks") or ()):
            self.with_feedback[message_id] = text
        else:
            self.with_feedback.pop(message_id, None)


class StopMessage:
    """The Stop button of a natively streamed answer: a message of its own, because a stream takes no blocks
    until it is stopped. Posted only while the answer runs and only when the channel's post budget has a call
    to spare at once (never queued behind answers' texts), deleted as soon as the answer's final text is about
    to go."""

    def __init__(
        self, surfaces: Any, target: Any, *, after_s: float = STOP_AFTER_S, needed: Callable[[], bool] = lambda: True,
    ) -> None:
        self._surfaces = surfaces
        self._target = target
        self._after_s = after_s
        self._needed = needed  # asked when it is time to post: False, and there is no message
        self._ts: str | None = None
        self._ended = False
        self._posting = False
        self._task: asyncio.Task[None] | None = None
        self._removal: asyncio.Task[None] | None = None

    async def show(self, run_id: str) -> None:
        self._task = asyncio.get_running_loop().create_task(self._post_later(run_id))

    async def _post_later(self, run_id: str) -> None:
        surfaces, target = self._surfaces, self._target
        await asyncio.sleep(self._after_s)
        budget = surfaces.budgets.post(target.team_id, target.channel)
        while not self._ended and self._needed() and not budget.try_acquire(Priority.INTERMEDIATE):
            await surfaces.clock.sleep(STOP_RETRY_S)
        if self._ended or not self._needed():
            return
        # From here on the message may exist: the end waits for it, to delete it.
        self._posting = True
        try:
            response = await surfaces.web.once(
                "chat.postMessage", channel=target.channel, thread_ts=target.thread_ts, text=STOP_FALLBACK,
                blocks=stop_blocks(run_id), metadata=post_metadata(f"stop:{uuid.uuid4().hex}"),
            )
        except Exception as exc:
            # A control, not the answer: the answer goes on without it (and nothing is left to delete).
            logger.warning("could not show the Stop button of run %s: %s", run_id, exc)
            return
        self._ts = str(response["ts"])

    async def end(self) -> None:
        """The final text is about to go: the message is deleted first (without holding the final up)."""
        self._ended = True
        if self._removal is None:
            self._removal = asyncio.get_running_loop().create_task(self._remove())

    async def clear(self) -> None:
        await self.end()
        assert self._removal is not None
        await asyncio.wait({self._removal})

    async def _remove(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            if not self._posting:
                task.cancel()
            await asyncio.wait({task})  # a post under way is waited for, so its message is deleted too
        ts, self._ts = self._ts, None
        if ts is None:
            return
        surfaces = self._surfaces
        try:
            await surfaces.web.call(
                "chat.delete", budget=surfaces.budgets.delete(self._target.team_id), channel=self._target.channel, ts=ts
            )
        except Exception as exc:
            logger.warning("could not delete the Stop message %s: %s", ts, exc)


class SlackStops:
    """Stop clicks: acked at once, then one call to the engine, which finds the run in whichever process it runs."""

    def __init__(self, *, runs: Any, surfaces: Any, gate: Gate, access: Any) -> None:
        self._runs = runs  # core.runs.Runs: stop(run_id, actor=…)
        self._surfaces = surfaces
        self._gate = gate
        self._access = access

    async def on_stop(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        with self._gate.track():
            click = read_click(body)
            user_id, channel, thread_ts, run_id, user = click.user_id, click.channel, click.thread_ts, click.value, click.user
            if not user_id or not channel or not run_id:
                logger.warning("ignoring a Stop click without its user, channel or run")
                return
            access = self._access.person(
                user_id, (click.user_team,) if click.user_team else (), direct=channel.startswith("D")
            )
            if access == "direct_messages_off":
                await self._tell(click.user_team, channel, user_id, thread_ts, shared_wording.direct_messages_off())
                return
            if access == "refused":
                await self._tell(click.user_team, channel, user_id, thread_ts, shared_wording.not_your_workspace_to_decide())
                return
            # The name goes into the answer's text, where a mention would be neutralised: the person's name.
            name = str(user.get("name") or user.get("username") or user_id)
            try:
                result = await self._runs.stop(
                    run_id, actor=Actor(id=user_id, name=name), mention=wording.mention, admins=False
                )
            except Exception:
                logger.exception("Stop click on run %s failed", run_id)
                await self._tell(click.user_team, channel, user_id, thread_ts, shared_wording.click_failed())
                return
            if result.outcome != "stopping":
                await self._tell(click.user_team, channel, user_id, thread_ts, result.message)

    async def _tell(self, team_id: str, channel: str, user_id: str, thread_ts: Any, text: str) -> None:
        try:
            # The deadline lane: a note to the person who clicked never waits behind deliveries.
            await self._surfaces.web.now(
                team_id, "chat.postEphemeral", channel=channel, user=user_id, text=text,
                **({"thread_ts": str(thread_ts)} if thread_ts else {}),
            )
        except Exception:
            logger.exception("could not tell %s: %s", user_id, text)
