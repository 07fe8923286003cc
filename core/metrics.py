"""Prometheus metrics of the process (prometheus-client), and the small functions that record them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

UNKNOWN = "unknown"

ANSWERS = Counter(
    "relaybot_answers", "Runs ended, by platform and outcome (answered, approval, failed, cancelled).",
    ["platform", "outcome"],
)
FIRST_TOKEN_SECONDS = Histogram(
    "relaybot_model_first_token_seconds", "From the start of a run to the model's first answer text.",
    ["platform", "model"], buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60),
)
TOTAL_SECONDS = Histogram(
    "relaybot_model_total_seconds", "From the start of a run to its end (every model call and tool of it).",
    ["platform", "model"], buckets=(0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300),
)
TOKENS = Counter(
    "relaybot_tokens", "Tokens the model reported, by direction (in: prompt, out: completion).",
    ["platform", "model", "direction"],
)
TOOL_RUNS = Counter(
    "relaybot_tool_runs", "Tool runs by tool and outcome (ok, error, timeout, crashed).", ["tool", "outcome"]
)
APPROVALS = Counter(
    "relaybot_approvals", "Approval decisions by decision (approved, rejected, refused, expired).", ["decision"]
)
OUTBOX_EXPIRED = Counter(
    "relaybot_outbox_expired", "Kept final answers dropped undelivered after OUTBOX_MAX_AGE_S, by platform.",
    ["platform"],
)
RATE_LIMITED = Counter(
    "relaybot_rate_limited", "429 answers received, by platform and method.", ["platform", "method"]
)
MALFORMED_EVENTS = Counter(
    "relaybot_malformed_events", "Platform events dropped because they could not be read, by platform.", ["platform"]
)
STREAMER_QUEUE = Gauge(
    "relaybot_streamer_queue_depth", "Platform calls (answer posts and edits, one-off sends) waiting for a rate budget.",
    ["platform"],
)
DB_POOL_IN_USE = Gauge("relaybot_db_pool_in_use", "Database connections checked out of the pool.")
# Fine buckets below 0.1 s (the fuzz bench's target) and up to 10 s: a stall of any size lands in a bucket that names it.
LOOP_LAG_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
EVENT_LOOP_LAG = Histogram(
    "relaybot_event_loop_lag_seconds", "How late the event loop ran its heartbeat (core/loop_watch.py), each beat.",
    buckets=LOOP_LAG_BUCKETS_S,
)


def record_answer(
    *, platform: str, outcome: str, model: str, first_token_s: float | None, total_s: float | None,
    tokens_in: int, tokens_out: int,
) -> None:
    platform = platform or UNKNOWN
    ANSWERS.labels(platform=platform, outcome=outcome).inc()
    if first_token_s is not None:
        FIRST_TOKEN_SECONDS.labels(platform=platform, model=model).observe(first_token_s)
    if total_s is not None:
        TOTAL_SECONDS.labels(platform=platform, model=model).observe(total_s)
    if tokens_in:
        TOKENS.labels(platform=platform, model=model, direction="in").inc(tokens_in)
    if tokens_out:
        TOKENS.labels(platform=platform, model=model, direction="out").inc(tokens_out)


def record_tool_run(*, tool: str, outcome: str) -> None:
    TOOL_RUNS.labels(tool=tool, outcome=outcome).inc()


def record_approval(*, decision: str) -> None:
    APPROVALS.labels(decision=decision).inc()


def record_rate_limited(*, platform: str, method: str) -> None:
    RATE_LIMITED.labels(platform=platform or UNKNOWN, method=method or UNKNOWN).inc()


def record_loop_lag(seconds: float) -> None:
    EVENT_LOOP_LAG.observe(max(0.0, seconds))


def record_malformed_event(*, platform: str) -> None:
    MALFORMED_EVENTS.labels(platform=platform or UNKNOWN).inc()


@contextmanager
def waiting_for_budget(platform: str) -> Iterator[None]:
    """Counts the block as one call queued behind a rate budget."""
    gauge = STREAMER_QUEUE.labels(platform=platform or UNKNOWN)
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()


def watch_pool(in_use: Callable[[], float] | None) -> None:
    """Read the database pool's connections in use at every scrape (None: nothing to read, 0)."""
    DB_POOL_IN_USE.set_function(in_use if in_use is not None else (lambda: 0.0))


def render(registry: CollectorRegistry = REGISTRY) -> tuple[bytes, str]:
    """The metrics in Prometheus' text format, and its content type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST
