"""Slack's Stop button (a small message of its own in the answer's thread, deleted when the answer ends) and its clicks."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from slack_bolt.async_app import AsyncAck

from adapters import wording as shared_wording
from adapters.gate import Gate
from core.requests import Actor

from . import wording
from .buttons import read_click
from .transport import Priority

# The surface builds a StopMessage, so this module imports neither it nor inbound: `surfaces` is a
# surface.SlackSurfaces, `target` a surface.ReplyTarget, `access` an inbound.SlackAccess.

logger = logging.getLogger(__name__)

STOP_ACTION = "relaybot_stop"
STOP_LABEL = "⏹ Stop"
STOP_FALLBACK = "⏹ Stop this answer"
# Real seconds a run goes on before its Stop message is posted (most quick answers never need one).
STOP_AFTER_S = 1.0


def stop_blocks(run_id: str) -> list[dict[str, Any]]:
    """One button whose value is the run id: all a click needs, in whichever process it lands."""
    return [{
        "type": "actions", "block_id": f"stop-{run_id[:8]}",
        "elements": [{
            "type": "button", "action_id": STOP_ACTION, "style": "danger", "value": run_id,
            "text": {"type": "plain_text", "text": STOP_LABEL},
        }],
    }]


class StopMessage:
    """The Stop button of one answer: a message of its own, because an answer's messages are `markdown_text`
    (which Slack takes with no blocks beside it) and a natively streamed message carries no buttons while it
    streams either. Posted when the run starts, deleted when the answer has ended."""

    def __init__(self, surfaces: Any, target: Any, *, after_s: float = STOP_AFTER_S) -> None:
        self._surfaces = surfaces
        self._target = target
        self._after_s = after_s
        self._ts: str | None = None
        self._posting = False
        self._task: asyncio.Task[None] | None = None

    async def show(self, run_id: str) -> None:
        """Posted only once the run has gone on for `after_s`: a quick answer costs no extra calls."""
        self._task = asyncio.get_running_loop().create_task(self._post_later(run_id))

    async def _post_later(self, run_id: str) -> None:
        await asyncio.sleep(self._after_s)
        surfaces, target = self._surfaces, self._target

        # From here on the message may exist: clear() waits for it, to delete it.
        self._posting = True
        # After every answer's first and final texts: under a burst, a Stop button must not delay them.
        try:
            response = await surfaces.post_paced(
                target, text=STOP_FALLBACK, blocks=stop_blocks(run_id), priority=Priority.INTERMEDIATE
            )
        except Exception as exc:
            # A control, not the answer: the answer goes on without it (and nothing is left to delete).
            logger.warning("could not show the Stop button of run %s: %s", run_id, exc)
            return
        self._ts = str(response["ts"])

    async def clear(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            if not self._posting:
                task.cancel()
            await asyncio.wait({task})  # a post under way is waited for, so its message is deleted too
        ts, self._ts = self._ts, None
        if ts is None:
            return
        surfaces = self._surfaces
        await surfaces.web.call(
            "chat.delete", budget=surfaces.budgets.delete(self._target.team_id), channel=self._target.channel, ts=ts
        )


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
