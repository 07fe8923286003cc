"""Slack's Stop and 👍/👎 on the answer's own messages (the blocks each post and edit carries), the run of each
native stream (which takes no blocks until it stops), and Stop: the button's clicks and the "Stop this answer"
message shortcut."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncBoltContext, AsyncRespond

from adapters import wording as shared_wording
from adapters.gate import Gate
from adapters.streaming.transport import LiveText
from core.ports import AppState
from core.requests import Actor, team_key

from . import wording
from .buttons import read_click
from .feedback import FEEDBACK_ACTION, feedback_blocks, parse_value
from .render import markdown_text, sentence

# The surface builds these, so this module imports neither it nor inbound: `surfaces` is a
# surface.SlackSurfaces, `target` a surface.ReplyTarget, `access` an inbound.SlackAccess.

logger = logging.getLogger(__name__)

STOP_ACTION = "relaybot_stop"
STOP_LABEL = "⏹ Stop"
# The message shortcut (slack-app-manifest.yaml): Stop for any message of an answer, a native stream's too.
STOP_SHORTCUT = "relaybot_stop_answer"
# AppState key of a native stream's run: the one thing a shortcut on a streaming message cannot read from it.
STREAM_RUN_PREFIX = "slack:stream-run:"
STREAM_RUN_KEY = STREAM_RUN_PREFIX + "{channel}:{ts}"
# How long a native stream's run is remembered (a shortcut on an older message is told it is no answer being
# written, which it is not), and how often the older ones are removed (real seconds).
STREAM_RUN_KEEP_S = 7 * 24 * 3600.0
STREAM_RUN_PRUNE_EVERY_S = 3600.0


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


class StreamRuns:
    """The run of each natively streamed message, for "Stop this answer": a stream carries neither blocks nor
    metadata until it stops, so its message cannot say which run it shows. This process's streams are known in
    memory; each is also written to the app's state, for a shortcut that another process receives (the row stays
    after the stream ends, so a late shortcut is told the answer finished)."""

    def __init__(self, state: AppState | None) -> None:
        self._state = state
        self._local: dict[tuple[str, str], str] = {}
        self._writes: set[asyncio.Task[None]] = set()
        self._next_prune = float("-inf")

    def started(self, channel: str, ts: str, run_id: str) -> None:
        if self._local.get((channel, ts)) == run_id:
            return
        self._local[(channel, ts)] = run_id
        if self._state is not None:
            # Not awaited: the stream's next append never waits on the database.
            task = asyncio.get_running_loop().create_task(self._write(channel, ts, run_id))
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)

    async def prune(self) -> None:
        """At most once every STREAM_RUN_PRUNE_EVERY_S: forget the runs of streams older than STREAM_RUN_KEEP_S."""
        now = time.monotonic()
        if self._state is None or now < self._next_prune:
            return
        self._next_prune = now + STREAM_RUN_PRUNE_EVERY_S
        try:
            await self._state.forget(STREAM_RUN_PREFIX, older_than_s=STREAM_RUN_KEEP_S)
        except Exception as exc:
            logger.warning("could not forget the runs of old native streams: %s", exc)

    def ended(self, channel: str, ts: str) -> None:
        self._local.pop((channel, ts), None)

    async def run_of(self, channel: str, ts: str) -> str | None:
        """The run of stream `ts` in `channel` (this process's, else as written by any), or None."""
        local = self._local.get((channel, ts))
        if local is not None or self._state is None:
            return local
        return await self._state.get(STREAM_RUN_KEY.format(channel=channel, ts=ts)) or None

    async def _write(self, channel: str, ts: str, run_id: str) -> None:
        assert self._state is not None
        try:
            await self._state.put(STREAM_RUN_KEY.format(channel=channel, ts=ts), run_id)
        except Exception as exc:
            # Costs only the shortcut in other processes; this one knows the stream's run.
            logger.warning("could not record the run of native stream %s in %s: %s", ts, channel, exc)


class SlackStops:
    """Stop, from the button or the message shortcut: acked at once, then one call to the engine, which finds the
    run in whichever process it runs and applies the same rule of who may stop it."""

    def __init__(self, *, runs: Any, surfaces: Any, gate: Gate, access: Any, streams: StreamRuns) -> None:
        self._runs = runs  # core.runs.Runs: stop(run_id, actor=…)
        self._surfaces = surfaces
        self._gate = gate
        self._access = access
        self._streams = streams

    async def on_stop(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        with self._gate.track():
            click = read_click(body)
            user_id, channel, thread_ts, run_id, user = click.user_id, click.channel, click.thread_ts, click.value, click.user
            if not user_id or not channel or not run_id:
                logger.warning("ignoring a Stop click without its user, channel or run")
                return

            async def tell(text: str) -> None:
                await self._tell(click.team, channel, user_id, thread_ts, text)

            await self._stop(run_id, user_id=user_id, user=user, teams=(click.user_team,) if click.user_team else (),
                             channel=channel, tell=tell, team=click.team)

    async def on_shortcut(
        self, ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond, context: AsyncBoltContext,
    ) -> None:
        """"Stop this answer" from a message's ⋯ menu: the run of that message, whichever way it is written — the
        Stop button its blocks carry (post+update), or the native stream's recorded run."""
        await ack()
        with self._gate.track():
            shortcut = read_shortcut(body)
            user_id, channel, message = shortcut.user_id, shortcut.channel, shortcut.message

            async def tell(text: str) -> None:
                # Through the shortcut's response_url: an ephemeral reply that needs the bot in no channel.
                try:
                    await respond(text=sentence(text), response_type="ephemeral")
                except Exception:
                    logger.exception("could not tell %s: %s", user_id, text)

            if not user_id or not channel or not message.get("ts"):
                logger.warning("ignoring a Stop shortcut without its user, channel or message")
                return
            bot_id, bot_user = context.bot_id or "", context.bot_user_id or ""
            mine = (bool(bot_id) and message.get("bot_id") == bot_id) or (bool(bot_user) and message.get("user") == bot_user)
            if not mine:
                await tell(shared_wording.stop_shortcut_not_mine())
                return
            try:
                run_id = run_of(message) or await self._streams.run_of(channel, str(message["ts"]))
            except Exception:
                logger.exception("could not find the run of message %s in %s", message.get("ts"), channel)
                await tell(shared_wording.click_failed())
                return
            if run_id is None:
                await tell(shared_wording.stop_shortcut_no_answer())
                return
            await self._stop(run_id, user_id=user_id, user=shortcut.user, teams=shortcut.teams, channel=channel, tell=tell,
                             team=shortcut.team)

    async def _stop(
        self, run_id: str, *, user_id: str, user: dict[str, Any], teams: tuple[str, ...], channel: str,
        tell: Callable[[str], Awaitable[None]], team: str,
    ) -> None:
        """`team`: the workspace whose message was clicked; a run of another team is not found from it."""
        access = self._access.person(user_id, teams, direct=channel.startswith("D"))
        if access == "direct_messages_off":
            await tell(shared_wording.direct_messages_off())
            return
        if access == "refused":
            await tell(shared_wording.not_your_workspace_to_decide())
            return
        # The name goes into the answer's text, where a mention would be neutralised: the person's name.
        name = str(user.get("name") or user.get("username") or user_id)
        try:
            result = await self._runs.stop(run_id, actor=Actor(id=user_id, name=name), mention=wording.mention, admins=False,
                                           team=team_key("slack", team) if team else None)
        except Exception:
            logger.exception("Stop on run %s failed", run_id)
            await tell(shared_wording.click_failed())
            return
        if result.outcome != "stopping":
            await tell(result.message)

    async def _tell(self, team_id: str, channel: str, user_id: str, thread_ts: Any, text: str) -> None:
        try:
            # The deadline lane: a note to the person who clicked never waits behind deliveries.
            await self._surfaces.web.now(
                team_id, "chat.postEphemeral", channel=channel, user=user_id, text=text,
                **({"thread_ts": str(thread_ts)} if thread_ts else {}),
            )
        except Exception:
            logger.exception("could not tell %s: %s", user_id, text)


@dataclass(frozen=True, kw_only=True)
class MessageShortcut:
    """A message_action body's fields; what Slack left out (or malformed) comes back empty."""

    user_id: str
    teams: tuple[str, ...]  # the teams the body says the user belongs to
    team: str  # the workspace the shortcut was used in
    user: dict[str, Any]
    channel: str
    message: dict[str, Any]


def read_shortcut(body: Any) -> MessageShortcut:
    body = body if isinstance(body, dict) else {}
    user = body.get("user") if isinstance(body.get("user"), dict) else {}
    channel = body.get("channel") if isinstance(body.get("channel"), dict) else {}
    message = body.get("message") if isinstance(body.get("message"), dict) else {}
    team = user.get("team_id")
    where = body.get("team") if isinstance(body.get("team"), dict) else {}
    return MessageShortcut(
        user_id=str(user.get("id") or ""), teams=(team,) if isinstance(team, str) and team else (), user=user,
        team=str(where.get("id") or team or ""),
        channel=str(channel.get("id") or ""), message=message,
    )
