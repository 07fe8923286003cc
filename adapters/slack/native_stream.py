"""Slack's native streams (chat.startStream / appendStream / stopStream) as the streamer's transport, each answer falling back to post+update without losing or repeating text."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from slack_sdk.errors import SlackApiError

from adapters.answers import Pacing
from adapters.streaming import Clock, Priority, RateBudget, RateLimited, TransientSendError
from adapters.streaming.budget_map import BudgetMap
from adapters.streaming.transport import LiveText

from .controls import StreamRuns
from .feedback import feedback_blocks
from .render import markdown_text, safe_markdown
from .surface import ReplyTarget, SlackSurface, SlackSurfaces
from .budgets import IDLE_BUDGET_S
from .metadata import part_metadata
from .working import WorkingSign

logger = logging.getLogger(__name__)

NativeSetting = Literal["auto", "off"]
# chat.startStream is Tier 2 (about 20 a minute per workspace), chat.appendStream Tier 4 (100+); chat.stopStream
# is counted like starting (one per stream). The bot keeps a call of each burst in reserve.
START_CALLS_PER_MINUTE = 20.0
START_BURST_CALLS = 4.0
APPEND_CALLS_PER_MINUTE = 100.0
APPEND_BURST_CALLS = 15.0
STOP_CALLS_PER_MINUTE = 20.0
STOP_BURST_CALLS = 4.0
RATE_MARGIN = 0.98
# A stream is not kept open forever: past this age (Slack seconds) the answer goes on with chat.update.
STREAM_MAX_AGE_S = 300.0
# A workspace that refused the stream methods (method_not_supported, an Enterprise org or GovSlack host, a
# missing scope) is not asked again for this long (Slack seconds).
REFUSED_RETRY_S = 3600.0
# A ping or mention cut between two appends (`@chan` + `nel`) must be neutralised whole, and an append can
# never be taken back: text from a `@`, `<` or `&` among the last characters waits for the next append.
HOLD_BACK_CHARS = 12
HOLD_FROM = ("@", "<", "&")

Mode = Literal["undecided", "native", "classic"]


@dataclass
class NativeCounts:
    """Answers so far: streamed natively (and of those, switched to post+update), or posted and updated from the start."""

    native: int = 0
    fell_back: int = 0
    post_update: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class NativeStreaming:
    """One per adapter: whether native streams are used, the three methods' budgets per workspace, and the
    workspaces that refused them."""

    def __init__(self, *, setting: NativeSetting, clock: Clock, share: float, streams: StreamRuns | None = None) -> None:
        self.setting = setting
        # Each stream's run, for the "Stop this answer" shortcut (a stream takes no Stop button).
        self.streams = streams or StreamRuns(None)
        self._clock = clock
        self._share = share
        self._refused_until: dict[str, float] = {}
        self.counts = NativeCounts()
        # Streams this process's answers are sending now: a look-up for an unseen start never takes one of them.
        self.live_streams: set[str] = set()
        self._starts: BudgetMap[str] = BudgetMap(
            lambda team: self._budget(START_CALLS_PER_MINUTE, START_BURST_CALLS), keep_idle_s=IDLE_BUDGET_S
        )
        self._appends: BudgetMap[str] = BudgetMap(
            lambda team: self._budget(APPEND_CALLS_PER_MINUTE, APPEND_BURST_CALLS), keep_idle_s=IDLE_BUDGET_S
        )
        self._stops: BudgetMap[str] = BudgetMap(
            lambda team: self._budget(STOP_CALLS_PER_MINUTE, STOP_BURST_CALLS), keep_idle_s=IDLE_BUDGET_S
        )

    def _budget(self, per_minute: float, burst: float) -> RateBudget:
        return RateBudget(
            capacity=max(1.0, burst * self._share), refill_per_s=per_minute * self._share * RATE_MARGIN / 60.0,
            clock=self._clock,
        )

    def start(self, team_id: str) -> RateBudget:
        return self._starts(team_id)

    def append(self, team_id: str) -> RateBudget:
        return self._appends(team_id)

    def stop(self, team_id: str) -> RateBudget:
        return self._stops(team_id)

    def usable(self, target: ReplyTarget) -> bool:
        """Streams need a thread, and in channels the recipient and their team; a refusing workspace waits."""
        if self.setting == "off" or not target.thread_ts:
            return False
        if not target.channel.startswith("D") and not (target.recipient_user and target.recipient_team):
            return False
        return self._refused_until.get(target.team_id, float("-inf")) <= self._clock.now()

    def refused(self, team_id: str, error: str) -> None:
        logger.warning("Slack refused native streaming in %s (%s); answers there use post+update for a while", team_id, error)
        self._refused_until[team_id] = self._clock.now() + REFUSED_RETRY_S

    def fell_back(self, reason: str) -> None:
        self.counts.fell_back += 1
        self.counts.reasons[reason] = self.counts.reasons.get(reason, 0) + 1


class NativeSlackSurfaces(SlackSurfaces):
    """SlackSurfaces whose answers stream natively where `NativeStreaming` allows; every other answer (and
    every notice, approval and sources reply) is the plain SlackSurface."""

    def __init__(self, *, native: NativeStreaming, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.native = native

    def at(self, target: ReplyTarget, *, sign: WorkingSign | None = None) -> SlackSurface:
        if self.native.usable(target):
            return NativeSlackSurface(self, target, self.native, sign=sign)
        return SlackSurface(self, target, sign=sign)


class _Answer:
    """Which way one answer goes: decided by its first post, and switched to classic for good on any trouble."""

    def __init__(self, native: NativeStreaming) -> None:
        self.mode: Mode = "undecided"
        self._native = native

    def to_classic(self, reason: str) -> None:
        if self.mode == "native":
            self._native.fell_back(reason)
        self.mode = "classic"


class _Switch:
    """The RateBudget the streamer draws on for one answer: the stream method's while it streams natively,
    the post+update one otherwise. The posting one decides the answer's way at its first post: a stream
    when a chat.startStream token is free now (never for a final), post+update otherwise."""

    def __init__(self, answer: _Answer, *, native: RateBudget, classic: RateBudget, counts: NativeCounts | None) -> None:
        self._answer = answer
        self._native = native
        self._classic = classic
        self._counts = counts  # given to the posting switch only: it counts the decision
        self._granted: RateBudget | None = None

    @property
    def _target(self) -> RateBudget:
        return self._native if self._answer.mode == "native" else self._classic

    def _decide(self, priority: Priority | None, shows_text: bool) -> bool:
        """True when this request was granted by deciding on a native stream."""
        if self._counts is None or self._answer.mode != "undecided":
            return False
        if priority is Priority.FIRST and self._native.try_acquire(priority, shows_text=shows_text):
            self._answer.mode = "native"
            self._counts.native += 1
            self._granted = self._native
            return True
        self._answer.mode = "classic"
        self._counts.post_update += 1
        return False

    def _next_stream(self, priority: Priority | None, shows_text: bool) -> bool:
        """A later message of a streaming answer (after a roll-over) streams only if a start is free now;
        otherwise the rest of the answer posts and updates rather than wait on the low tier."""
        if self._counts is None or self._answer.mode != "native" or priority is not Priority.FIRST:
            return False
        if self._native.try_acquire(priority, shows_text=shows_text):
            self._granted = self._native
            return True
        self._answer.to_classic("start_budget")
        return False

    async def acquire(
        self, priority: Priority, requester_key: Hashable = None, *, shows_text: bool = False,
        promote: asyncio.Event | None = None,
    ) -> None:
        if self._decide(priority, shows_text) or self._next_stream(priority, shows_text):
            return
        target = self._target
        await target.acquire(priority, requester_key, shows_text=shows_text, promote=promote)
        self._granted = target

    def try_acquire(self, priority: Priority | None = None, *, shows_text: bool = False) -> bool:
        if self._decide(priority, shows_text) or self._next_stream(priority, shows_text):
            return True
        target = self._target
        if target.try_acquire(priority, shows_text=shows_text):
            self._granted = target
            return True
        return False

    def penalize(self, retry_after_s: float, *, wide: bool = True) -> None:
        (self._granted or self._target).penalize(retry_after_s, wide=wide)

    def release(self) -> None:
        (self._granted or self._target).release()


@dataclass(frozen=True)
class _UnseenStart:
    """A chat.startStream sent without seeing its outcome: when (epoch seconds) and the text it carried."""

    since: float
    text: str
    found: str | None = None  # the stream's message once a look-up found it


@dataclass(kw_only=True)
class _Stream:
    ts: str
    key: str | None
    started_at: float
    appended: str = ""  # the rendered Markdown Slack has been sent
    task: tuple[str, str] | None = None  # (id, title) of the task shown as running
    tasks: int = 0
    live: bool = True


class NativeSlackSurface(SlackSurface):
    """A SlackSurface whose messages stream with chat.startStream / appendStream / stopStream.

    The streamer still sends whole texts: a live update (`LiveText`) becomes an append of what is new, a
    final text (plain str) the stream's stop. Anything that cannot go on as a stream — a 429 or any
    other refusal of a stream method, a final that is not a continuation of what was streamed, a stream too
    old — stops the stream where it is and the answer goes on with chat.update of that same message, which
    replaces its text whole: nothing is lost and nothing shown twice."""

    def __init__(
        self, surfaces: SlackSurfaces, target: ReplyTarget, native: NativeStreaming, *, sign: WorkingSign | None = None,
    ) -> None:
        super().__init__(surfaces, target, sign=sign)
        self._native = native
        self._web = surfaces.web
        self._clock = surfaces.clock
        self._classic = self._transport  # post+update, carrying the answer's buttons
        self._answer = _Answer(native)
        # A stream takes no blocks until it is stopped, so no Stop button: its run is recorded for the message
        # shortcut instead (once the answer posts and updates, its live updates carry the button).
        self._run_id: str | None = None
        team = target.team_id
        self._classic_post = self.pacing.post_budget
        self._classic_edit = self.pacing.edit_budget
        self.pacing = replace(
            self.pacing,
            post_budget=_Switch(self._answer, native=native.start(team), classic=self._classic_post, counts=native.counts),  # type: ignore[arg-type]
            edit_budget=_Switch(self._answer, native=native.append(team), classic=self._classic_edit, counts=None),  # type: ignore[arg-type]
        )
        self._streams: dict[str, _Stream] = {}
        self._unseen_start: _UnseenStart | None = None

    @property
    def mode(self) -> Mode:
        return self._answer.mode

    # --- AnswerControls ---

    async def show_stop(self, run_id: str) -> None:
        await super().show_stop(run_id)
        self._run_id = run_id
        for ts in self._streams:
            self._native.streams.started(self.target.channel, ts, run_id)

    async def clear_stop(self) -> None:
        for ts in self._streams:
            self._native.streams.ended(self.target.channel, ts)
        await super().clear_stop()

    # --- MessageTransport ---

    async def post(self, text: str, *, key: str | None = None) -> str:
        if self._unseen_start is not None:
            # An earlier start's outcome was never seen (the streamer's call timeout cut it): the stream it may
            # have made is looked for before anything is sent again.
            was_native = self._answer.mode == "native"
            if (adopted := await self._look_for_start(text, key)) is not None:
                return adopted
            if was_native:
                self._answer.to_classic("start_unseen")
                await self._classic_post.acquire(Priority.FIRST, key)
        if self._answer.mode != "native":
            return await self._classic.post(text, key=key)
        if not isinstance(text, LiveText):
            # A final that needs a message of its own: a plain post, on the post budget.
            await self._classic_post.acquire(Priority.FINAL, key)
            self._native.start(self.target.team_id).release()
            return await self._classic.post(text, key=key)
        try:
            return await self._start(text, key)
        except RateLimited as exc:
            self._unseen_start = None  # a 429 comes before the work
            self._native.start(self.target.team_id).penalize(exc.retry_after_s, wide=exc.wide)
            reason = "rate_limited"
        except TransientSendError as exc:
            logger.info("chat.startStream failed (%s); this answer uses post+update", exc)
            reason = "transient"
        except SlackApiError as exc:
            self._unseen_start = None  # a refusal: nothing was made
            reason = _error(exc)
            self._native.refused(self.target.team_id, reason)
        self._answer.to_classic(reason)
        if self._unseen_start is not None and (adopted := await self._look_for_start(text, key)) is not None:
            return adopted
        # The first text still goes out now, as a post (on the post budget: the stream's token was used).
        await self._classic_post.acquire(Priority.FIRST, key)
        return await self._classic.post(text, key=key)

    async def edit(self, message_id: str, text: str) -> None:
        stream = self._streams.get(message_id)
        if stream is None or not stream.live or self._answer.mode != "native":
            await self._classic.edit(message_id, text)
            return
        if self._clock.now() - stream.started_at > STREAM_MAX_AGE_S:
            await self._fall_back(stream, "stream_too_old")
        if isinstance(text, LiveText):
            await self._append(stream, text)
        else:
            await self._stop(stream, text)

    # --- the stream ---

    async def _start(self, text: LiveText, key: str | None) -> str:
        rendered = _sendable(safe_markdown(text.body), "")
        stream = _Stream(ts="", key=key, started_at=self._clock.now())
        chunks = _task_chunks(stream, text.status)
        arguments: dict[str, Any] = {}
        if chunks:
            arguments["chunks"] = ([{"type": "markdown_text", "text": rendered}] if rendered else []) + chunks
        elif rendered:
            arguments["markdown_text"] = rendered
        if not self.target.channel.startswith("D"):
            arguments.update(recipient_user_id=self.target.recipient_user, recipient_team_id=self.target.recipient_team)
        self._unseen_start = _UnseenStart(since=time.time(), text=rendered)
        response = await self._web.once(
            "chat.startStream", channel=self.target.channel, thread_ts=self.target.thread_ts or "", **arguments
        )
        self._unseen_start = None
        self._sign.replied()
        stream.ts = str(response["ts"])
        stream.appended = rendered
        self._streams[stream.ts] = stream
        self._native.live_streams.add(stream.ts)
        if self._run_id is not None:
            self._native.streams.started(self.target.channel, stream.ts, self._run_id)
        return stream.ts

    async def _look_for_start(self, text: str, key: str | None) -> str | None:
        """After a start whose outcome was not seen: the stream it made, if any, becomes this answer's message
        (stopped, and given `text` and the part's metadata by chat.update); None when there is none, and the
        caller posts. A failure here leaves the start unseen, so the streamer's retry looks again."""
        unseen = self._unseen_start
        assert unseen is not None
        metadata: dict[str, Any] = {"metadata": part_metadata(key)} if key is not None else {}
        if unseen.found is None:
            live = self._native.live_streams

            def started(message: dict[str, Any]) -> bool:
                # Streams carry no metadata until stopped; one of ours still streaming is another answer's.
                return (bool(message.get("bot_id")) and "metadata" not in message and str(message.get("ts")) not in live
                        and str(message.get("text") or "").strip() == unseen.text.strip())

            found = await self._web.find_where(
                team_id=self.target.team_id, channel=self.target.channel, thread_ts=self.target.thread_ts,
                since=unseen.since, match=started,
            )
            if found is None:
                self._unseen_start = None
                return None
            self._unseen_start = unseen = replace(unseen, found=str(found["ts"]))
            logger.info("chat.startStream's unseen outcome was stream %s in %s; it goes on with chat.update",
                        unseen.found, self.target.channel)
            self._answer.to_classic("start_unseen")
            if self._native.stop(self.target.team_id).try_acquire(Priority.FINAL):
                try:
                    # Stopped with the part's metadata first: should this process die before the update, the
                    # next one finds the message by it instead of posting the part beside it.
                    await self._web.once("chat.stopStream", channel=self.target.channel, ts=unseen.found, **metadata)
                except Exception as exc:  # the update below ends the stream anyway
                    logger.info("could not stop native stream %s: %s", unseen.found, exc)
        assert unseen.found is not None
        await self._web.once(
            "chat.update", channel=self.target.channel, ts=unseen.found, markdown_text=markdown_text(text), **metadata
        )
        self._unseen_start = None
        return unseen.found

    async def _append(self, stream: _Stream, text: LiveText) -> None:
        rendered = safe_markdown(text.body)
        if not rendered.startswith(stream.appended):
            await self._fall_back(stream, "text_rewritten")
        sendable = _sendable(rendered, stream.appended)
        delta = sendable[len(stream.appended):]
        chunks = _task_chunks(stream, text.status)
        if not delta and not chunks:
            return
        if chunks:
            arguments: dict[str, Any] = {"chunks": ([{"type": "markdown_text", "text": delta}] if delta else []) + chunks}
        else:
            arguments = {"markdown_text": delta}
        try:
            await self._web.once("chat.appendStream", channel=self.target.channel, ts=stream.ts, **arguments)
        except RateLimited as exc:
            self._native.append(self.target.team_id).penalize(exc.retry_after_s, wide=exc.wide)
            await self._fall_back(stream, "rate_limited")
        except (TransientSendError, SlackApiError) as exc:
            await self._fall_back(stream, _error(exc))
        stream.appended = sendable

    async def _stop(self, stream: _Stream, final: str) -> None:
        rendered = markdown_text(final)
        if not rendered.startswith(stream.appended):
            # A final that changes what was streamed (a citation removed, a failure's sentence): stop the
            # stream as it is and replace the message's text whole.
            await self._fall_back(stream, "final_rewritten")
        arguments: dict[str, Any] = {}
        delta = rendered[len(stream.appended):]
        chunks = _task_chunks(stream, None)
        if chunks:
            arguments["chunks"] = ([{"type": "markdown_text", "text": delta}] if delta else []) + chunks
        elif delta:
            arguments["markdown_text"] = delta
        if stream.key is not None:
            arguments["metadata"] = part_metadata(stream.key)
        if self._buttons.feedback:
            # Rendered under the streamed text once it is final: the answer's 👍/👎 cost no call of their own.
            arguments["blocks"] = feedback_blocks(self._buttons.feedback)
        stop_budget = self._native.stop(self.target.team_id)
        await stop_budget.acquire(Priority.FINAL, id(self))
        try:
            await self._web.once("chat.stopStream", channel=self.target.channel, ts=stream.ts, **arguments)
        except RateLimited as exc:
            stop_budget.penalize(exc.retry_after_s, wide=exc.wide)
            await self._fall_back(stream, "rate_limited", stop=False)
        except (TransientSendError, SlackApiError) as exc:
            await self._fall_back(stream, _error(exc), stop=False)
        self._buttons.sent(stream.ts, final, {"blocks": arguments.get("blocks")})
        stream.appended = rendered
        stream.live = False
        self._native.live_streams.discard(stream.ts)

    async def _fall_back(self, stream: _Stream, reason: str, *, stop: bool = True) -> None:
        """The answer goes on with post+update: the stream is stopped where it is (if a token is free; an
        update ends it anyway) and the streamer is told to send again, which now edits with chat.update."""
        logger.info("native stream %s in %s goes on with chat.update (%s)", stream.ts, self.target.channel, reason)
        stream.live = False
        self._native.live_streams.discard(stream.ts)
        self._answer.to_classic(reason)
        if stop and self._native.stop(self.target.team_id).try_acquire(Priority.FINAL):
            try:
                await self._web.once("chat.stopStream", channel=self.target.channel, ts=stream.ts)
            except Exception as exc:  # an update ends the stream anyway
                logger.info("could not stop native stream %s: %s", stream.ts, exc)
        raise TransientSendError(f"native stream stopped ({reason}); continuing with chat.update")


def _sendable(rendered: str, appended: str) -> str:
    """What of `rendered` may be sent now: all of it but a ping or mention that may still be growing at its
    end (never less than already sent)."""
    tail_start = max(0, len(rendered) - HOLD_BACK_CHARS)
    held = max((rendered.rfind(mark, tail_start) for mark in HOLD_FROM), default=-1)
    return rendered[: max(len(appended), held if held >= 0 else len(rendered))]


def _task_chunks(stream: _Stream, status: str | None) -> list[dict[str, Any]]:
    """The task chunks that show a change of the status line: the running task completes, a new one runs."""
    if (stream.task[1] if stream.task else None) == status:
        return []
    chunks: list[dict[str, Any]] = []
    if stream.task is not None:
        chunks.append({"type": "task_update", "id": stream.task[0], "title": stream.task[1], "status": "complete"})
        stream.task = None
    if status:
        stream.tasks += 1
        stream.task = (f"task_{stream.tasks}", status)
        chunks.append({"type": "task_update", "id": stream.task[0], "title": status, "status": "in_progress"})
    return chunks


def _error(exc: BaseException) -> str:
    if isinstance(exc, SlackApiError) and exc.response is not None:
        return str(exc.response.get("error") or "error")
    return type(exc).__name__

