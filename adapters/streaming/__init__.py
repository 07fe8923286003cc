"""Platform-neutral streaming of answers into chat messages, for the Slack and Discord adapters."""

from __future__ import annotations

from .fair_queue import Priority
from .rate_budget import RateBudget
from .clock import Clock, MonotonicClock
from .limits import StreamLimits
from .splitter import SplitPart, split_for_limit, split_parts
from .streamer import MessageStreamer, OnMessagePosted
from .transport import CONNECTION_ERRORS, MessageTransport, RateLimited, TransientSendError, classify_failure, parse_retry_after

__all__ = [
    "CONNECTION_ERRORS",
    "classify_failure",
    "parse_retry_after",
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
