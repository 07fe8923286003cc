"""Slack's AI-app and app surface methods: native streams (chat.*Stream), assistant threads and the Home tab."""

from __future__ import annotations

import json
import time
from typing import Any

from .state import AssistantRecord, JsonDict, MessageRecord, StatusRecord, StreamRecord, Team, ViewRecord
from .store import Channel, SlackStore
from .validation import MARKDOWN_TEXT_MAX_CHARS, Rejection, check_blocks, parse_blocks

HOME_BLOCKS_MAX = 100
SUGGESTED_PROMPTS_MAX = 4
LOADING_MESSAGES_MAX = 10
CHUNK_TYPES = frozenset({"markdown_text", "task_update", "plan_update", "blocks"})
TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})


def _error(code: str) -> JsonDict:
    return {"ok": False, "error": code}


def _json(raw: Any) -> Any:
    if isinstance(raw, str) and raw:
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return None
    return raw


def _chunks(raw: Any) -> tuple[str, list[JsonDict]] | None:
    """The markdown text and the other chunks of a `chunks` argument; None when it is not a list of known chunks."""
    if raw is None or raw == "":
        return "", []
    chunks = _json(raw)
    if not isinstance(chunks, list):
        return None
    text, others = "", []
    for chunk in chunks:
        if not isinstance(chunk, dict) or chunk.get("type") not in CHUNK_TYPES:
            return None
        if chunk["type"] == "markdown_text":
            text += str(chunk.get("text") or "")
        elif chunk["type"] == "task_update":
            if not chunk.get("id") or not chunk.get("title") or chunk.get("status") not in TASK_STATUSES:
                return None
            others.append(chunk)
        else:
            others.append(chunk)
    return text, others


class AppSurfaces:
    """Handlers the WebApi registers; `streaming_supported` False answers every stream method
    `method_not_supported` (an Enterprise Grid org or GovSlack host without them)."""

    def __init__(self, store: SlackStore, *, time_scale: float, stream_timeout_s: float | None) -> None:
        self._store = store
        self._scale = time_scale
        self.stream_timeout_s = stream_timeout_s  # Slack seconds a stream lives; None: until stopped
        self.streaming_supported = True

    def handlers(self) -> dict[str, Any]:
        return {
            "chat.startStream": self.start_stream,
            "chat.appendStream": self.append_stream,
            "chat.stopStream": self.stop_stream,
            "assistant.threads.setStatus": self.set_status,
            "assistant.threads.setTitle": self.set_title,
            "assistant.threads.setSuggestedPrompts": self.set_suggested_prompts,
            "views.publish": self.views_publish,
        }

    def _channel(self, team: Team, params: JsonDict, key: str = "channel") -> Channel | None:
        channel_id = params.get(key)
        if not isinstance(channel_id, str) or not channel_id:
            return None
        return self._store.channel(channel_id, team_id=team.team_id, create=True)

    # --- native streams ---
    async def start_stream(self, team: Team, params: JsonDict) -> JsonDict:
        if not self.streaming_supported:
            return _error("method_not_supported")
        channel = self._channel(team, params)
        if channel is None:
            return _error("channel_not_found")
        if channel.channel_id in self._store.bot_not_member:
            return _error("not_in_channel")
        thread_ts = params.get("thread_ts")
        if not isinstance(thread_ts, str) or not thread_ts:
            return _error("invalid_arguments")  # streams are always replies
        root = self._store.thread_root_ts(channel, thread_ts)
        if root is None:
            return _error("message_not_found")
        direct = channel.channel_id.startswith("D")
        if not direct and not params.get("recipient_user_id"):
            return _error("missing_recipient_user_id")
        if not direct and not params.get("recipient_team_id"):
            return _error("missing_recipient_team_id")
        found = _chunks(params.get("chunks"))
        if found is None:
            return _error("invalid_chunks")
        chunk_text, others = found
        text = str(params.get("markdown_text") or "") + chunk_text
        if len(text) > MARKDOWN_TEXT_MAX_CHARS:
            return _error("msg_too_long")
        record = self._store.post(channel, text=text, blocks=None, thread_ts=root, user=team.bot_user_id, bot_id=team.bot_id)
        record.markdown = True
        record.stream = StreamRecord(
            recipient_user_id=params.get("recipient_user_id"), recipient_team_id=params.get("recipient_team_id"),
            started_at_s=time.monotonic(), appends=[text], append_at_s=[time.monotonic()], chunks=others,
        )
        return {"ok": True, "channel": channel.channel_id, "ts": record.ts}

    def _streaming(self, team: Team, params: JsonDict) -> tuple[Channel, MessageRecord] | JsonDict:
        if not self.streaming_supported:
            return _error("method_not_supported")
        channel = self._channel(team, params)
        if channel is None:
            return _error("channel_not_found")
        record = channel.messages.get(str(params.get("ts", "")))
        if record is None or record.deleted:
            return _error("message_not_found")
        stream = record.stream
        if stream is None or stream.stopped or record.bot_id != team.bot_id:
            return _error("message_not_in_streaming_state")
        if self.stream_timeout_s is not None and time.monotonic() - stream.started_at_s > self.stream_timeout_s * self._scale:
            stream.stopped, stream.stopped_by = True, "timeout"
            return _error("message_not_in_streaming_state")
        return channel, record

    def _add(self, record: MessageRecord, params: JsonDict, *, required: bool) -> JsonDict | None:
        assert record.stream is not None
        found = _chunks(params.get("chunks"))
        if found is None:
            return _error("invalid_chunks")
        chunk_text, others = found
        text = str(params.get("markdown_text") or "") + chunk_text
        if required and not text and not others:
            return _error("no_text")
        if len(text) > MARKDOWN_TEXT_MAX_CHARS or len(record.text) + len(text) > 4 * MARKDOWN_TEXT_MAX_CHARS:
            return _error("msg_too_long")
        record.text += text
        record.stream.appends.append(text)
        record.stream.append_at_s.append(time.monotonic())
        record.stream.chunks += others
        return None

    async def append_stream(self, team: Team, params: JsonDict) -> JsonDict:
        found = self._streaming(team, params)
        if isinstance(found, dict):
            return found
        channel, record = found
        problem = self._add(record, params, required=True)
        return problem or {"ok": True, "channel": channel.channel_id, "ts": record.ts}

    async def stop_stream(self, team: Team, params: JsonDict) -> JsonDict:
        found = self._streaming(team, params)
        if isinstance(found, dict):
            return found
        channel, record = found
        blocks = parse_blocks(params.get("blocks"))
        if isinstance(blocks, Rejection):
            return {"ok": False, "error": blocks.error, "errors": blocks.details}
        if blocks is not None:
            rejection = check_blocks(blocks)  # at most 50 (BLOCKS_MAX_COUNT), apart from any sent in `chunks`
            if rejection is not None:
                return {"ok": False, "error": rejection.error, "errors": rejection.details}
        problem = self._add(record, params, required=False)
        if problem is not None:
            return problem
        if blocks is not None:
            record.blocks = blocks  # rendered under the streamed text, which stays the message's text
        metadata = _json(params.get("metadata"))
        if isinstance(metadata, dict) and isinstance(metadata.get("event_type"), str):
            record.metadata = {"event_type": metadata["event_type"], "event_payload": metadata.get("event_payload") or {}}
        assert record.stream is not None
        record.stream.stopped, record.stream.stopped_by = True, "stop"
        record.stream.stopped_at_s = time.monotonic()
        return {"ok": True, "channel": channel.channel_id, "ts": record.ts, "message": record.to_api()}

    # --- assistant threads ---
    async def set_status(self, team: Team, params: JsonDict) -> JsonDict:
        """A thread's status (chat:write or assistant:write): shown until "" clears it or the app replies in the
        thread (Slack also drops it after two minutes, not modelled); `loading_messages` (at most 10) rotate under it."""
        refusal = self._store.refusals.get("assistant.threads.setStatus")
        if refusal is not None:
            return {"ok": False, "error": refusal, "needed": "chat:write", "provided": "commands"}
        channel = self._channel(team, params, key="channel_id")
        if channel is None:
            return _error("channel_not_found")
        thread_ts = params.get("thread_ts")
        if not isinstance(thread_ts, str) or not thread_ts:
            return _error("invalid_arguments")
        root = self._store.thread_root_ts(channel, thread_ts)
        if root is None:
            return _error("invalid_thread_ts")
        loading = _json(params.get("loading_messages"))
        if loading is None or loading == "":
            loading = []
        if (not isinstance(loading, list) or len(loading) > LOADING_MESSAGES_MAX
                or not all(isinstance(m, str) and m for m in loading)):
            return _error("invalid_arguments")
        record = StatusRecord(
            channel=channel.channel_id, thread_ts=thread_ts, status=str(params.get("status", "")),
            team_id=team.team_id, at_s=time.monotonic(), loading_messages=tuple(loading),
        )
        self._store.statuses.append(record)
        if record.status:
            self._store.shown_status[(channel.channel_id, root)] = record
        else:
            self._store.shown_status.pop((channel.channel_id, root), None)
        return {"ok": True}

    async def set_title(self, team: Team, params: JsonDict) -> JsonDict:
        channel = self._channel(team, params, key="channel_id")
        if channel is None:
            return _error("channel_not_found")
        if not params.get("thread_ts") or not str(params.get("title") or "").strip():
            return _error("invalid_arguments")
        self._record("assistant.threads.setTitle", team, channel, params)
        return {"ok": True}

    async def set_suggested_prompts(self, team: Team, params: JsonDict) -> JsonDict:
        channel = self._channel(team, params, key="channel_id")
        if channel is None:
            return _error("channel_not_found")
        prompts = _json(params.get("prompts"))
        if (
            not isinstance(prompts, list) or not 1 <= len(prompts) <= SUGGESTED_PROMPTS_MAX
            or not all(isinstance(p, dict) and p.get("title") and p.get("message") for p in prompts)
        ):
            return _error("invalid_arguments")
        self._record("assistant.threads.setSuggestedPrompts", team, channel, {**params, "prompts": prompts})
        return {"ok": True}

    def _record(self, method: str, team: Team, channel: Channel, params: JsonDict) -> None:
        thread_ts = params.get("thread_ts")
        self._store.assistant_calls.append(AssistantRecord(
            method=method, channel=channel.channel_id, thread_ts=str(thread_ts) if thread_ts else None,
            team_id=team.team_id, params=dict(params),
        ))

    # --- the Home tab ---
    async def views_publish(self, team: Team, params: JsonDict) -> JsonDict:
        user_id = params.get("user_id")
        if not isinstance(user_id, str) or user_id not in self._store.users:
            return _error("user_not_found")
        view = _json(params.get("view"))
        if not isinstance(view, dict) or view.get("type") != "home":
            return _error("invalid_arguments")
        blocks = view.get("blocks")
        if not isinstance(blocks, list) or len(blocks) > HOME_BLOCKS_MAX or not all(isinstance(b, dict) and "type" in b for b in blocks):
            return _error("invalid_blocks")
        self._store.views.append(ViewRecord(user_id=user_id, team_id=team.team_id, view=view, at_s=time.monotonic()))
        return {"ok": True, "view": {"id": f"V{len(self._store.views):08d}", "type": "home", "team_id": team.team_id, **view}}
