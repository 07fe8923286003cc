"""Builders for the payloads Slack sends an app (events, interactions) and their signed delivery."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import aiohttp
from slack_sdk.signature import SignatureVerifier

JsonDict = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Delivery:
    """What the app answered to one delivery; unpacks as (status, latency_s)."""

    status: int
    latency_s: float
    body: str

    def __iter__(self) -> Iterator[Any]:
        return iter((self.status, self.latency_s))


def new_event_id() -> str:
    return "Ev" + uuid.uuid4().hex[:10].upper()


def _message_like(
    kind: str, *, text: str, user: str, channel: str, ts: str, thread_ts: str | None,
    team_id: str, files: list[JsonDict] | None, user_team: str | None = None, source_team: str | None = None,
) -> JsonDict:
    """`team_id` is the workspace the event is delivered for; `user_team` the author's own when it differs
    (a Slack Connect channel shared with another organisation): Slack then names it as `team`,
    `user_team`, `source_team` (where the message was sent from) and in `user_profile`."""
    author_team = user_team or team_id
    event: JsonDict = {
        "type": kind,
        "user": user,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "channel": channel,
        "team": author_team,
        "client_msg_id": str(uuid.uuid4()),
    }
    if user_team is not None or source_team is not None:
        event["user_team"] = author_team
        event["source_team"] = source_team or author_team
        event["user_profile"] = {"name": user.lower(), "real_name": user.title(), "display_name": user.lower(),
                                 "is_restricted": False, "is_ultra_restricted": False, "team": author_team}
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    if files:
        event["files"] = files
        event["upload"] = False
    return event


def app_mention_event(
    *, text: str, user: str, channel: str, ts: str, team_id: str,
    thread_ts: str | None = None, files: list[JsonDict] | None = None,
    user_team: str | None = None, source_team: str | None = None,
) -> JsonDict:
    """An `app_mention` event; `text` should contain `<@BOT_USER_ID>` as Slack's would."""
    return _message_like(
        "app_mention", text=text, user=user, channel=channel, ts=ts, thread_ts=thread_ts,
        team_id=team_id, files=files, user_team=user_team, source_team=source_team,
    )


def dm_message_event(
    *, text: str, user: str, channel: str, ts: str, team_id: str,
    thread_ts: str | None = None, files: list[JsonDict] | None = None,
    user_team: str | None = None, source_team: str | None = None,
) -> JsonDict:
    """A `message` event in a direct message (`channel_type` "im")."""
    event = _message_like(
        "message", text=text, user=user, channel=channel, ts=ts, thread_ts=thread_ts,
        team_id=team_id, files=files, user_team=user_team, source_team=source_team,
    )
    event["channel_type"] = "im"
    return event


def channel_message_event(
    *, text: str, user: str, channel: str, ts: str, team_id: str,
    thread_ts: str | None = None, files: list[JsonDict] | None = None,
    channel_type: str = "channel", user_team: str | None = None, source_team: str | None = None,
    subtype: str | None = None,
) -> JsonDict:
    """A `message` event in a public ("channel") or private ("group") channel; `subtype`
    "thread_broadcast" is a thread reply also sent to the channel."""
    event = _message_like(
        "message", text=text, user=user, channel=channel, ts=ts, thread_ts=thread_ts,
        team_id=team_id, files=files, user_team=user_team, source_team=source_team,
    )
    event["channel_type"] = channel_type
    if subtype is not None:
        event["subtype"] = subtype
    return event


def event_envelope(
    event: JsonDict, *, team_id: str, api_app_id: str, bot_user_id: str,
    event_id: str | None = None, event_time: int | None = None, is_ext_shared_channel: bool | None = None,
) -> JsonDict:
    """The `event_callback` body Slack posts (or wraps in a Socket Mode envelope)."""
    # Slack marks channels shared with another organisation (Slack Connect): by default, when the
    # author's team is not the receiving one.
    shared = is_ext_shared_channel if is_ext_shared_channel is not None else event.get("user_team", team_id) != team_id
    return {
        "token": "emulator-verification-token",
        "team_id": team_id,
        "api_app_id": api_app_id,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or new_event_id(),
        "event_time": event_time if event_time is not None else int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team_id,
                "user_id": bot_user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": shared,
        "event_context": "4-" + uuid.uuid4().hex,
    }


def block_actions_payload(
    *, user: str, action_id: str, value: str, message: JsonDict, channel: str, team_id: str,
    api_app_id: str, response_url: str, block_id: str | None = None,
    container: JsonDict | None = None, team_domain: str = "emulator", username: str | None = None,
    user_team: str | None = None, element_type: str = "button", text: JsonDict | None = None,
) -> JsonDict:
    """A `block_actions` interaction for a button click on `message`; `user_team` is the clicker's own
    workspace when it is not `team_id` (a Slack Connect channel)."""
    action_ts = f"{time.time():.6f}"
    default_container: JsonDict = {
        "type": "message",
        "message_ts": message["ts"],
        "channel_id": channel,
        "is_ephemeral": False,
    }
    if "thread_ts" in message:
        default_container["thread_ts"] = message["thread_ts"]
    return {
        "type": "block_actions",
        "user": {"id": user, "username": username or user.lower(), "name": username or user.lower(),
                 "team_id": user_team or team_id},
        "api_app_id": api_app_id,
        "token": "emulator-verification-token",
        "container": container or default_container,
        "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}",
        "team": {"id": team_id, "domain": team_domain},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": channel.lower()},
        "message": message,
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [
            {
                "action_id": action_id,
                "block_id": block_id or uuid.uuid4().hex[:5],
                "text": text or {"type": "plain_text", "text": action_id, "emoji": True},
                "value": value,
                "type": element_type,
                "action_ts": action_ts,
            }
        ],
    }


def message_action_payload(
    *, user: str, callback_id: str, message: JsonDict, channel: str, team_id: str, api_app_id: str,
    response_url: str, team_domain: str = "emulator", username: str | None = None, user_team: str | None = None,
) -> JsonDict:
    """A `message_action` interaction: the user chose the app's message shortcut `callback_id` from `message`'s
    ⋯ menu (sent, like block_actions, as a signed `payload=` form)."""
    return {
        "type": "message_action",
        "token": "emulator-verification-token",
        "action_ts": f"{time.time():.6f}",
        "team": {"id": team_id, "domain": team_domain},
        "user": {"id": user, "username": username or user.lower(), "name": username or user.lower(),
                 "team_id": user_team or team_id},
        "channel": {"id": channel, "name": channel.lower()},
        "is_enterprise_install": False,
        "enterprise": None,
        "api_app_id": api_app_id,
        "callback_id": callback_id,
        "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}",
        "response_url": response_url,
        "message_ts": message["ts"],
        "message": message,
    }


def signed_headers(*, body: bytes, signing_secret: str, timestamp: int) -> dict[str, str]:
    signature = SignatureVerifier(signing_secret).generate_signature(timestamp=str(timestamp), body=body)
    assert signature is not None
    return {"X-Slack-Request-Timestamp": str(timestamp), "X-Slack-Signature": signature}


async def post_signed(
    session: aiohttp.ClientSession, url: str, *, body: bytes, content_type: str,
    signing_secret: str, timestamp: int | None, sign: bool,
    extra_headers: dict[str, str] | None = None, timeout_s: float,
) -> Delivery:
    """POSTs `body` as Slack would; with sign=False the signature is deliberately wrong."""
    ts = timestamp if timestamp is not None else int(time.time())
    headers = {"Content-Type": content_type, "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)"}
    headers.update(signed_headers(body=body, signing_secret=signing_secret if sign else "wrong-secret",
                                  timestamp=ts))
    headers.update(extra_headers or {})
    started = time.perf_counter()
    async with session.post(url, data=body, headers=headers,
                            timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
        text = await resp.text()
        return Delivery(status=resp.status, latency_s=time.perf_counter() - started, body=text)


def event_body(envelope: JsonDict) -> bytes:
    return json.dumps(envelope).encode()


def interaction_body(payload: JsonDict) -> bytes:
    return urlencode({"payload": json.dumps(payload)}).encode()


def app_home_opened_event(*, user: str, channel: str, tab: str = "home") -> JsonDict:
    """`app_home_opened`: the user opened the app's Home (or Messages) tab; `channel` is their DM with the app."""
    return {"type": "app_home_opened", "user": user, "channel": channel, "tab": tab, "event_ts": f"{time.time():.6f}"}


def assistant_thread_started_event(*, user: str, channel: str, thread_ts: str, team_id: str,
                                   context_channel: str | None = None) -> JsonDict:
    """`assistant_thread_started`: the user opened a new thread in the AI-app pane (a DM thread)."""
    context: JsonDict = {"team_id": team_id, "enterprise_id": None}
    if context_channel is not None:
        context["channel_id"] = context_channel
    return {
        "type": "assistant_thread_started",
        "assistant_thread": {"user_id": user, "context": context, "channel_id": channel, "thread_ts": thread_ts},
        "event_ts": f"{time.time():.6f}",
    }


def slash_command_payload(*, command: str, text: str, user: str, channel: str, team_id: str, api_app_id: str,
                          response_url: str, team_domain: str = "emulator") -> JsonDict:
    """What Slack sends for a slash command (form fields; as the payload of a Socket Mode envelope too)."""
    return {
        "token": "emulator-verification-token",
        "team_id": team_id,
        "team_domain": team_domain,
        "channel_id": channel,
        "channel_name": "directmessage" if channel.startswith("D") else channel.lower(),
        "user_id": user,
        "user_name": user.lower(),
        "command": command,
        "text": text,
        "api_app_id": api_app_id,
        "is_enterprise_install": "false",
        "response_url": response_url,
        "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}",
    }


def command_body(payload: JsonDict) -> bytes:
    return urlencode(payload).encode()
