"""Slack's native streams (chat.startStream / appendStream / stopStream) as the streamer's transport, each answer falling back to post+update without losing or repeating text."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from slack_sdk.errors import SlackApiError

from adapters.streaming import Priority, RateLimited, TransientSendError
from adapters.streaming.transport import LiveText

from .feedback import feedback_blocks
from .metadata import part_metadata
from .native_state import Stream, UnseenStart, error_code, sendable, task_chunks
from .native_streaming import NativeStreaming
from .native_switch import BudgetSwitch, Mode, NativeAnswer
from .render import markdown_text, safe_markdown
from .surface import ReplyTarget, SlackSurface, SlackSurfaces
from .working import WorkingSign

# adapter.py builds NativeStreaming from here.
__all__ = ["NativeSlackSurface", "NativeSlackSurfaces", "NativeStreaming"]

logger = logging.getLogger(__name__)

# A stream is not kept open forever: past this age (Slack seconds) the answer goes on with chat.update.
STREAM_MAX_AGE_S = 300.0


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
        self._answer = NativeAnswer(native)
        # A stream takes no blocks until it is stopped, so no Stop button: its run is recorded for the message
        # shortcut instead (once the answer posts and updates, its live updates carry the button).
        self._run_id: str | None = None
        team = target.team_id
        self._classic_post = self.pacing.post_budget
        self._classic_edit = self.pacing.edit_budget
        self.pacing = replace(
            self.pacing,
            post_budget=BudgetSwitch(self._answer, native=native.start(team), classic=self._classic_post, counts=native.counts),  # type: ignore[arg-type]
            edit_budget=BudgetSwitch(self._answer, native=native.append(team), classic=self._classic_edit, counts=None),  # type: ignore[arg-type]
        )
        self._streams: dict[str, Stream] = {}
        self._unseen_start: UnseenStart | None = None

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
            reason = error_code(exc)
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
        rendered = sendable(safe_markdown(text.body), "")
        stream = Stream(ts="", key=key, started_at=self._clock.now())
        chunks = task_chunks(stream, text.status)
        arguments: dict[str, Any] = {}
        if chunks:
            arguments["chunks"] = ([{"type": "markdown_text", "text": rendered}] if rendered else []) + chunks
        elif rendered:
            arguments["markdown_text"] = rendered
        if not self.target.channel.startswith("D"):
            arguments.update(recipient_user_id=self.target.recipient_user, recipient_team_id=self.target.recipient_team)
        self._unseen_start = UnseenStart(since=time.time(), text=rendered)
        response = await self._web.once(
            self.target.team_id, "chat.startStream", channel=self.target.channel, thread_ts=self.target.thread_ts or "", **arguments
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
                    await self._web.once(self.target.team_id, "chat.stopStream", channel=self.target.channel, ts=unseen.found, **metadata)
                except Exception as exc:  # the update below ends the stream anyway
                    logger.info("could not stop native stream %s: %s", unseen.found, exc)
        assert unseen.found is not None
        await self._web.once(
            self.target.team_id, "chat.update", channel=self.target.channel, ts=unseen.found, markdown_text=markdown_text(text), **metadata
        )
        self._unseen_start = None
        return unseen.found

    async def _append(self, stream: Stream, text: LiveText) -> None:
        rendered = safe_markdown(text.body)
        if not rendered.startswith(stream.appended):
            await self._fall_back(stream, "text_rewritten")
        sent_now = sendable(rendered, stream.appended)
        delta = sent_now[len(stream.appended):]
        chunks = task_chunks(stream, text.status)
        if not delta and not chunks:
            return
        if chunks:
            arguments: dict[str, Any] = {"chunks": ([{"type": "markdown_text", "text": delta}] if delta else []) + chunks}
        else:
            arguments = {"markdown_text": delta}
        try:
            await self._web.once(self.target.team_id, "chat.appendStream", channel=self.target.channel, ts=stream.ts, **arguments)
        except RateLimited as exc:
            self._native.append(self.target.team_id).penalize(exc.retry_after_s, wide=exc.wide)
            await self._fall_back(stream, "rate_limited")
        except (TransientSendError, SlackApiError) as exc:
            await self._fall_back(stream, error_code(exc))
        stream.appended = sent_now

    async def _stop(self, stream: Stream, final: str) -> None:
        rendered = markdown_text(final)
        if not rendered.startswith(stream.appended):
            # A final that changes what was streamed (a citation removed, a failure's sentence): stop the
            # stream as it is and replace the message's text whole.
            await self._fall_back(stream, "final_rewritten")
        arguments: dict[str, Any] = {}
        delta = rendered[len(stream.appended):]
        chunks = task_chunks(stream, None)
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
            await self._web.once(self.target.team_id, "chat.stopStream", channel=self.target.channel, ts=stream.ts, **arguments)
        except RateLimited as exc:
            stop_budget.penalize(exc.retry_after_s, wide=exc.wide)
            await self._fall_back(stream, "rate_limited", stop=False)
        except (TransientSendError, SlackApiError) as exc:
            await self._fall_back(stream, error_code(exc), stop=False)
        self._buttons.sent(stream.ts, final, {"blocks": arguments.get("blocks")})
        stream.appended = rendered
        stream.live = False
        self._native.live_streams.discard(stream.ts)

    async def _fall_back(self, stream: Stream, reason: str, *, stop: bool = True) -> None:
        """The answer goes on with post+update: the stream is stopped where it is (if a token is free; an
        update ends it anyway) and the streamer is told to send again, which now edits with chat.update."""
        logger.info("native stream %s in %s goes on with chat.update (%s)", stream.ts, self.target.channel, reason)
        stream.live = False
        self._native.live_streams.discard(stream.ts)
        self._answer.to_classic(reason)
        if stop and self._native.stop(self.target.team_id).try_acquire(Priority.FINAL):
            try:
                await self._web.once(self.target.team_id, "chat.stopStream", channel=self.target.channel, ts=stream.ts)
            except Exception as exc:  # an update ends the stream anyway
                logger.info("could not stop native stream %s: %s", stream.ts, exc)
        raise TransientSendError(f"native stream stopped ({reason}); continuing with chat.update")
