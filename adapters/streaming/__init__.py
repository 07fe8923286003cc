"""Platform-neutral streaming of answers into chat messages, for the Slack and Discord adapters."""

from __future__ import annotations

from .rate_budget import Priority, RateBudget
from .clock import Clock, MonotonicClock
from .limits import StreamLimits
from .splitter import SplitPart, split_for_limit, split_parts
from .streamer import MessageStreamer, OnMessagePosted
from .transport import MessageTransport, RateLimited, TransientSendError

__all__ = [
    "Clock",
    "MessageStreamer",
    "MessageTransport",
    "MonotonicClock",
    "OnMessagePosted",
    "Priority",
    "RateBudget",
    "RateLimited",
    "SplitPart",
    "StreamLimits",
    "TransientSendError",
    "split_for_limit",
    "split_parts",
]
