"""Slack Web API methods the bot uses, answered from the store the way Slack answers them."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .state import EphemeralRecord, Edit, JsonDict, MessageRecord, Team
from .store import Channel, SlackStore
from .validation import Rejection, check_message, markdown_text, parse_blocks

Handler = Callable[[Team, JsonDict], Awaitable[JsonDict]]

DEFAULT_REPLIES_LIMIT = 1000
# An emoji's name as reactions.add takes it (no colons): `eyes`, `+1`, `thumbsup::skin-tone-2`.
REACTION_NAME = re.compile(r"^[a-z0-9_+'-]+(::skin-tone-[2-6])?$")
DEFAULT_HISTORY_LIMIT = 100


def error(code: str, **extra: Any) -> JsonDict:
    return {"ok": False, "error": code, **extra}


def _rejected(rejection: Rejection) -> JsonDict:
    if rejection.details:
        return error(rejection.error, errors=rejection.details)
    return error(rejection.error)


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _page(items: list[MessageRecord], params: JsonDict, default_limit: int) -> tuple[list[MessageRecord], str]:
    """Slack's `oldest`/`latest` window (exclusive unless `inclusive`), then cursor pagination: the cursor
    is an opaque offset ("offset:N")."""
    items = _in_window(items, params)
    limit = max(1, _int(params.get("limit"), default_limit))
    cursor = str(params.get("cursor") or "")
    start = _int(cursor.removeprefix("offset:"), 0) if cursor.startswith("offset:") else 0
    page = items[start:start + limit]
    next_cursor = f"offset:{start + limit}" if start + limit < len(items) else ""
    return page, next_cursor


def _in_window(items: list[MessageRecord], params: JsonDict) -> list[MessageRecord]:
    oldest, latest = params.get("oldest"), params.get("latest")
    if oldest is None and latest is None:
        return items
    inclusive = str(params.get("inclusive", "")).lower() in ("1", "true")
    low = float(oldest) if oldest is not None else float("-inf")
    high = float(latest) if latest is not None else float("inf")
    if inclusive:
        return [m for m in items if low <= float(m.ts) <= high]
    return [m for m in items if low < float(m.ts) < high]


def _metadata(raw: Any) -> JsonDict | None | Rejection:
    """chat.postMessage's `metadata`: {"event_type": str, "event_payload": object}, as JSON or a string of it."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return Rejection(error="invalid_metadata_format", details=[])
    if not isinstance(raw, dict) or not isinstance(raw.get("event_type"), str) or not isinstance(raw.get("event_payload"), dict):
        return Rejection(error="invalid_metadata_format", details=[])
    return {"event_type": raw["event_type"], "event_payload": raw["event_payload"]}


def _has_markdown_block(blocks: list[JsonDict] | None) -> bool:
    """A `markdown` block: the message's text is Markdown Slack renders itself, as `markdown_text` is."""
    return any(block.get("type") == "markdown" for block in blocks or ())


def _asks_metadata(params: JsonDict) -> bool:
    return str(params.get("include_all_metadata", "")).lower() in ("1", "true")


class WebApi:
    """Maps a method name to a handler over the store."""

    def __init__(self, store: SlackStore) -> None:
        self._store = store
        # The most messages one page of conversations.replies / history holds (15 for the "limited" tier).
        self.page_max: int | None = None
        self.handlers: dict[str, Handler] = {
            "auth.test": self.auth_test,
            "users.info": self.users_info,
            "bots.info": self.bots_info,
            "chat.postMessage": self.chat_post_message,
            "chat.update": self.chat_update,
            "chat.postEphemeral": self.chat_post_ephemeral,
            "chat.delete": self.chat_delete,
            "chat.getPermalink": self.chat_get_permalink,
            "conversations.replies": self.conversations_replies,
            "conversations.history": self.conversations_history,
            "reactions.add": self.reactions_add,
            "reactions.remove": self.reactions_remove,
            "files.info": self.files_info,
        }
        # Native streams, assistant threads and the Home tab (app_surfaces.py), conversations.info / members and
        # users.conversations (conversations.py) are added by the server.

    def _channel(self, team: Team, params: JsonDict, *, key: str = "channel") -> Channel | None:
        channel_id = params.get(key)
        if not isinstance(channel_id, str) or not channel_id:
            return None
        return self._store.channel(channel_id, team_id=team.team_id, create=True)

    # --- identity ---
    async def auth_test(self, team: Team, params: JsonDict) -> JsonDict:
        return {
            "ok": True,
            "url": f"https://{team.domain}.slack.com/",
            "team": team.name,
            "user": "relaybot",
            "team_id": team.team_id,
            "user_id": team.bot_user_id,
            "bot_id": team.bot_id,
            "enterprise_id": team.enterprise_id,
            "is_enterprise_install": False,
        }

    async def users_info(self, team: Team, params: JsonDict) -> JsonDict:
        user = self._store.users.get(str(params.get("user", "")))
        if user is None or not self._store.sees(team, user):
            return error("user_not_found")
        return {
            "ok": True,
            "user": {
                "id": user.user_id,
                "team_id": user.team_id,
                "name": user.name,
                "real_name": user.real_name,
                "deleted": False,
                "is_bot": user.is_bot,
                "is_app_user": False,
                "is_admin": user.is_admin,
                "is_owner": user.is_owner,
                "is_primary_owner": False,
                "is_restricted": user.is_restricted or user.is_ultra_restricted,
                "is_ultra_restricted": user.is_ultra_restricted,
                "tz": "Europe/London",
                "profile": {"real_name": user.real_name, "display_name": user.name if user.display_name is None
                            else user.display_name, "team": user.team_id},
            },
        }

    async def bots_info(self, team: Team, params: JsonDict) -> JsonDict:
        bot = next((t for t in self._store.teams.values() if t.bot_id == params.get("bot")), None)
        if bot is None:
            return error("bot_not_found")
        return {
            "ok": True,
            "bot": {"id": bot.bot_id, "deleted": False, "name": "relaybot", "updated": int(time.time()),
                    "app_id": bot.app_id, "user_id": bot.bot_user_id, "icons": {}},
        }

    # --- messages ---
    async def chat_post_message(self, team: Team, params: JsonDict) -> JsonDict:
        channel = self._channel(team, params)
        if channel is None:
            return error("channel_not_found")
        if channel.channel_id in self._store.bot_not_member:
            return error("not_in_channel")
        markdown = markdown_text(params)
        if isinstance(markdown, Rejection):
            return _rejected(markdown)
        blocks = parse_blocks(params.get("blocks"))
        if isinstance(blocks, Rejection):
            return _rejected(blocks)
        text = markdown if markdown is not None else str(params.get("text") or "")
        if not text and not blocks:
            return error("no_text")
        rejection = None if markdown is not None else check_message(text=text, blocks=blocks, is_update=False)
        if rejection is not None:
            return _rejected(rejection)
        metadata = _metadata(params.get("metadata"))
        if isinstance(metadata, Rejection):
            return _rejected(metadata)
        thread_ts = params.get("thread_ts") or None
        if thread_ts is not None:
            thread_ts = self._store.thread_root_ts(channel, str(thread_ts))
            if thread_ts is None:
                return error("thread_not_found")
        record = self._store.post(channel, text=text, blocks=blocks, thread_ts=thread_ts,
                                  user=team.bot_user_id, bot_id=team.bot_id)
        record.metadata = metadata
        record.markdown = markdown is not None or _has_markdown_block(blocks)
        message = record.to_api()
        message["app_id"] = team.app_id
        return {"ok": True, "channel": channel.channel_id, "ts": record.ts, "message": message}

    def _own_message(self, team: Team, params: JsonDict) -> tuple[Channel, MessageRecord] | JsonDict:
        channel = self._channel(team, params)
        if channel is None:
            return error("channel_not_found")
        record = channel.messages.get(str(params.get("ts", "")))
        if record is None or record.deleted:
            return error("message_not_found")
        if record.bot_id != team.bot_id:
            return error("cant_update_message")
        return channel, record

    async def chat_update(self, team: Team, params: JsonDict) -> JsonDict:
        found = self._own_message(team, params)
        if isinstance(found, dict):
            return found
        channel, record = found
        markdown = markdown_text(params)
        if isinstance(markdown, Rejection):
            return _rejected(markdown)
        if markdown is not None:
            text, blocks = markdown, None  # the Markdown replaces the message whole
        else:
            blocks = parse_blocks(params.get("blocks")) if "blocks" in params else record.blocks
            if isinstance(blocks, Rejection):
                return _rejected(blocks)
            text = str(params.get("text") or "")
        if not text and not blocks:
            return error("no_text")
        rejection = None if markdown is not None else check_message(text=text, blocks=blocks, is_update=True)
        if rejection is not None:
            return _rejected(rejection)
        if "metadata" in params:  # chat.update may set a message's metadata (left as it is when not given)
            metadata = _metadata(params.get("metadata"))
            if isinstance(metadata, Rejection):
                return _rejected(metadata)
            record.metadata = metadata
        record.text, record.blocks, record.markdown = text, blocks, markdown is not None or _has_markdown_block(blocks)
        if record.stream is not None and not record.stream.stopped:
            record.stream.stopped, record.stream.stopped_by = True, "update"  # an update ends a stream
        record.edits.append(Edit(text=text, blocks=blocks, edited_ts=self._store.clock.next(),
                                 at_s=time.monotonic(), markdown=markdown is not None))
        return {"ok": True, "channel": channel.channel_id, "ts": record.ts, "text": text,
                "message": record.to_api()}

    async def chat_delete(self, team: Team, params: JsonDict) -> JsonDict:
        found = self._own_message(team, params)
        if isinstance(found, dict):
            return error("cant_delete_message") if found["error"] == "cant_update_message" else found
        channel, record = found
        record.deleted = True
        return {"ok": True, "channel": channel.channel_id, "ts": record.ts}

    async def chat_post_ephemeral(self, team: Team, params: JsonDict) -> JsonDict:
        channel = self._channel(team, params)
        if channel is None:
            return error("channel_not_found")
        user = params.get("user")
        if not isinstance(user, str) or not user:
            return error("user_not_found")
        blocks = parse_blocks(params.get("blocks"))
        if isinstance(blocks, Rejection):
            return _rejected(blocks)
        text = str(params.get("text") or "")
        if not text and not blocks:
            return error("no_text")
        rejection = check_message(text=text, blocks=blocks, is_update=False)
        if rejection is not None:
            return _rejected(rejection)
        message_ts = self._store.clock.next()
        self._store.ephemerals.append(EphemeralRecord(
            channel=channel.channel_id, team_id=team.team_id, user=user, text=text, blocks=blocks,
            thread_ts=params.get("thread_ts") or None, message_ts=message_ts,
        ))
        return {"ok": True, "message_ts": message_ts}

    async def chat_get_permalink(self, team: Team, params: JsonDict) -> JsonDict:
        channel = self._channel(team, params)
        if channel is None:
            return error("channel_not_found")
        ts = str(params.get("message_ts", ""))
        if ts not in channel.messages:
            return error("message_not_found")
        link = f"https://{team.domain}.slack.com/archives/{channel.channel_id}/p{ts.replace('.', '')}"
        return {"ok": True, "channel": channel.channel_id, "permalink": link}

    def _capped(self, params: JsonDict, default_limit: int) -> JsonDict:
        if self.page_max is None:
            return params
        return {**params, "limit": min(self.page_max, max(1, _int(params.get("limit"), default_limit)))}

    async def conversations_replies(self, team: Team, params: JsonDict) -> JsonDict:
        channel = self._channel(team, params)
        if channel is None:
            return error("channel_not_found")
        if channel.channel_id in self._store.bot_not_member:
            return error("not_in_channel")  # a bot reads only conversations it is in
        root = self._store.thread_root_ts(channel, str(params.get("ts", "")))
        if root is None:
            return error("thread_not_found")
        page, next_cursor = _page(self._store.thread(channel, root), self._capped(params, DEFAULT_REPLIES_LIMIT),
                                  DEFAULT_REPLIES_LIMIT)
        messages = [self._listed(channel, m, params) for m in page]
        return {"ok": True, "messages": messages, "has_more": bool(next_cursor),
                "response_metadata": {"next_cursor": next_cursor}}

    async def conversations_history(self, team: Team, params: JsonDict) -> JsonDict:
        channel = self._channel(team, params)
        if channel is None:
            return error("channel_not_found")
        if channel.channel_id in self._store.bot_not_member:
            return error("not_in_channel")
        newest_first = list(reversed(self._store.top_level(channel)))
        page, next_cursor = _page(newest_first, self._capped(params, DEFAULT_HISTORY_LIMIT), DEFAULT_HISTORY_LIMIT)
        messages = [self._listed(channel, m, params) for m in page]
        return {"ok": True, "messages": messages, "has_more": bool(next_cursor),
                "response_metadata": {"next_cursor": next_cursor}}

    def _listed(self, channel: Channel, record: MessageRecord, params: JsonDict) -> JsonDict:
        """A message as history and replies list it: a root with its reply_count and latest_reply."""
        return record.to_api(reply_count=self._store.reply_count(channel, record), include_metadata=_asks_metadata(params),
                             latest_reply=self._store.latest_reply(channel, record))

    # --- reactions ---
    def _reacted_message(self, team: Team, params: JsonDict, method: str) -> MessageRecord | JsonDict:
        if method in self._store.refusals:
            return error(self._store.refusals[method], needed="reactions:write", provided="chat:write")
        channel = self._channel(team, params)
        if channel is None:
            return error("channel_not_found")
        record = channel.messages.get(str(params.get("timestamp", "")))
        if record is None or record.deleted:
            return error("message_not_found")
        name = str(params.get("name") or "")
        if not REACTION_NAME.match(name):
            return error("invalid_name")
        return record

    async def reactions_add(self, team: Team, params: JsonDict) -> JsonDict:
        found = self._reacted_message(team, params, "reactions.add")
        if isinstance(found, dict):
            return found
        users = found.reactions.setdefault(str(params["name"]), [])
        if team.bot_user_id in users:
            return error("already_reacted")
        users.append(team.bot_user_id)
        return {"ok": True}

    async def reactions_remove(self, team: Team, params: JsonDict) -> JsonDict:
        found = self._reacted_message(team, params, "reactions.remove")
        if isinstance(found, dict):
            return found
        name = str(params["name"])
        users = found.reactions.get(name) or []
        if team.bot_user_id not in users:
            return error("no_reaction")
        users.remove(team.bot_user_id)
        if not users:
            del found.reactions[name]
        return {"ok": True}

    async def files_info(self, team: Team, params: JsonDict) -> JsonDict:
        record = self._store.files.get(str(params.get("file", "")))
        if record is None or record.team_id != team.team_id:
            return error("file_not_found")
        return {"ok": True, "file": record.info}
