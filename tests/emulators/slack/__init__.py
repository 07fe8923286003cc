"""A local Slack for end-to-end tests: Web API, signed event delivery and Socket Mode."""

from __future__ import annotations

from .events import (
    Delivery,
    app_home_opened_event,
    app_mention_event,
    assistant_thread_started_event,
    block_actions_payload,
    channel_message_event,
    dm_message_event,
    event_envelope,
    message_action_payload,
)
from .limits import DEFAULT_LIMITS, GENEROUS_LIMIT, WORKSPACE_POST_LIMIT, MethodLimit, workspace_post_cap
from .server import SlackEmulator
from .state import (
    CallRecord,
    Edit,
    EphemeralRecord,
    MessageRecord,
    SocketAck,
    StatusRecord,
    Team,
    User,
)

__all__ = [
    "DEFAULT_LIMITS",
    "GENEROUS_LIMIT",
    "WORKSPACE_POST_LIMIT",
    "CallRecord",
    "Delivery",
    "Edit",
    "EphemeralRecord",
    "MessageRecord",
    "MethodLimit",
    "SlackEmulator",
    "SocketAck",
    "StatusRecord",
    "Team",
    "User",
    "app_home_opened_event",
    "app_mention_event",
    "assistant_thread_started_event",
    "block_actions_payload",
    "channel_message_event",
    "dm_message_event",
    "event_envelope",
    "message_action_payload",
    "workspace_post_cap",
]
