"""What bench/slack_stream.py reads off the Slack emulator (per answer, its calls, messages, first sign, first text,
final text and the controls posted after it ended) and off its bot process; and the target lines it prints."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.emulators.slack import SlackEmulator

REPO = Path(__file__).resolve().parents[1]
# The bot opens its database, migrates and starts Bolt; under a loaded machine that has taken several seconds.
BOT_READY_LIMIT_S = 60.0
# A reading is a few attributes; a stop closes the adapter (its send queue, sockets and the pool's connections).
BOT_ANSWER_LIMIT_S = 10.0
BOT_STOP_LIMIT_S = 60.0
BOT_EXIT_LIMIT_S = 20.0
TRACEBACK = "Traceback (most recent call last)"

# Methods that create a message in the thread (what "posts per answer" counts; chat.postMessage is the
# posting budget's own).
POSTING_METHODS = frozenset({"chat.postMessage", "chat.startStream"})


@dataclass(kw_only=True)
class Probe:
    channel: str
    answer: str
    chunk_delay_s: float
    chunks: int
    tag: str = ""
    sent_at: float = 0.0
    question_ts: str = ""
    model_started_at: float = 0.0

    @property
    def model_first_token_at(self) -> float:
        return self.model_started_at + self.chunk_delay_s

    @property
    def model_last_token_at(self) -> float:
        return self.model_started_at + self.chunks * self.chunk_delay_s


def percentile(values: Iterable[float], pct: float) -> float:
    ordered = sorted(v for v in values if not math.isnan(v))
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(pct / 100 * len(ordered)) - 1))]


def target(met: bool) -> str:
    return "ok" if met else "MISSES TARGET"


def _texts(text: str | None, blocks: list[Any] | None) -> list[str]:
    """What a message (or one edit of it) shows: its text and its blocks' Markdown or section text."""
    shown = [text or ""]
    for block in blocks or ():
        if isinstance(block, dict):
            body = block.get("text")
            shown.append(str(body.get("text") or "") if isinstance(body, dict) else str(body or ""))
    return shown


class Reading:
    """The emulator's record of one answer per channel."""

    def __init__(self, slack: SlackEmulator) -> None:
        self.slack = slack

    def bot_messages(self, probe: Probe) -> list[Any]:
        return [m for m in self.slack.messages(probe.channel, include_deleted=True) if m.is_bot]

    def calls(self, probe: Probe, *, since: float = 0.0) -> list[Any]:
        """Every Web API call the bot made in the answer's channel."""
        return [c for c in self.slack.calls if c.at_s >= since
                and probe.channel in (c.params.get("channel"), c.params.get("channel_id"))]

    def delivered(self, probe: Probe) -> bool:
        return any(probe.answer in _texts(m.text, m.blocks) for m in self.bot_messages(probe) if not m.deleted)

    def answer_messages(self, probe: Probe) -> list[Any]:
        return [m for m in self.bot_messages(probe)
                if any("Answer for" in t for t in _texts(m.posted_text, None) + _texts(m.text, m.blocks))
                or any("Answer for" in t for e in m.edits for t in _texts(e.text, e.blocks))
                or (m.stream is not None)]

    def first_text_at(self, probe: Probe) -> float | None:
        times = []
        for message in self.bot_messages(probe):
            if message.stream is not None:
                shown = ""
                for text, at_s in zip(message.stream.appends, message.stream.append_at_s):
                    shown += text
                    if "Answer for" in shown:
                        times.append(at_s)
                        break
            if "Answer for" in (message.posted_text or ""):
                times.append(message.posted_at_s)
            times += [e.at_s for e in message.edits if any("Answer for" in t for t in _texts(e.text, e.blocks))]
        return min(times) if times else None

    def first_sign_at(self, probe: Probe) -> float | None:
        """The first thing the asker sees: a status in the thread, a reaction on the question, or the answer's text
        or placeholder."""
        times = [s.at_s for s in self.slack.statuses if s.channel == probe.channel and s.status]
        times += [c.at_s for c in self.calls(probe) if c.method == "reactions.add" and c.error is None]
        times += [m.posted_at_s for m in self.bot_messages(probe)]
        return min(times) if times else None

    def final_at(self, probe: Probe) -> float | None:
        for message in self.bot_messages(probe):
            if not message.deleted and probe.answer in _texts(message.text, message.blocks):
                if message.edits:
                    return message.edits[-1].at_s
                if message.stream is not None and message.stream.stopped_at_s is not None:
                    return message.stream.stopped_at_s
                return message.posted_at_s
        return None

    def placeholders(self, probes: list[Probe]) -> int:
        return sum("thinking" in (m.posted_text or "") for p in probes for m in self.bot_messages(p))

    def controls_after_end(self, probe: Probe) -> int:
        """Messages other than the answer's posted after its final text arrived (a Stop, a feedback prompt)."""
        ended = self.final_at(probe)
        if ended is None:
            return 0
        answer = {m.ts for m in self.answer_messages(probe)}
        return sum(m.posted_at_s > ended for m in self.bot_messages(probe) if m.ts not in answer)

    def posts(self, probe: Probe) -> int:
        """Messages the bot made in the answer's channel (deleted ones too)."""
        return len(self.bot_messages(probe))

    def posting_calls(self, probe: Probe) -> int:
        return sum(c.method in POSTING_METHODS and c.error is None for c in self.calls(probe))


@dataclass(frozen=True, kw_only=True)
class Limit:
    """A posting limit as a token bucket: `burst` calls at once, then `per_slack_s` a Slack second."""

    burst: float
    per_slack_s: float

    def seconds_for(self, calls: int) -> float:
        """Slack seconds before the `calls`-th call can go."""
        return max(0.0, calls - self.burst) / self.per_slack_s


def how_first_text_came(reading: Reading, probe: Probe) -> str:
    """A few words on the answer's first message: when it was posted and with what, and how its text came."""
    messages = sorted(reading.bot_messages(probe), key=lambda m: m.posted_at_s)
    if not messages:
        return "no message"
    first = messages[0]
    shown = "a stream" if first.stream is not None else ("its text" if "Answer for" in (first.posted_text or "")
                                                         else repr((first.posted_text or "")[:24]))
    line = f"first message posted {first.posted_at_s - probe.sent_at:.2f} s real after the event, showing {shown}"
    if first.stream is None and "Answer for" not in (first.posted_text or ""):
        edits = [e for e in first.edits if any("Answer for" in t for t in _texts(e.text, e.blocks))]
        line += f"; text by chat.update {edits[0].at_s - probe.sent_at:.2f} s real" if edits else "; no text edit"
    calls = ", ".join(f"{c.method} {c.at_s - probe.sent_at:.2f}" + ("" if c.status == 200 and c.error is None else f" ({c.status} {c.error})")
                      for c in reading.calls(probe))
    return line + f"; model's first token {probe.model_first_token_at - probe.sent_at:.2f} s real; its calls (s real): {calls}"


def position_ratios(reading: Reading, probes: list[Probe], *, limits: tuple[Limit, ...], overhead_s: float,
                    time_scale: float, own_slots: bool = False) -> list[tuple[int, float, float, Probe]]:
    """Each answer's (position, first text, bound, probe) in real seconds after its event. Positions are the order the
    questions were asked (their ts: the bot's budget queues rank answers by it). The bound is when an ideal server
    would have shown the answer: posts at the slower of the posting limits (the platform's, and the bot's own budget as
    it stood when the burst came), counted from when the first answer's text was ready, each to the oldest answer whose
    text is ready (its model's first token) — an answer whose model was late is not owed its position's slot, and
    a younger one that was ready takes it; plus what a lone answer takes from token to text (`overhead_s`).

    `own_slots`: nor sooner than the budget itself showed its k-th first text (the burst's first texts in time order) —
    the bound a budget that does not know the platform's limit allows: the pauses its 429s imposed are no answer's
    to make up, and what is measured is whether each answer got its position's slot among those the budget had."""
    ordered = sorted(probes, key=_asked_at)
    first_ready = min(p.model_first_token_at for p in probes)
    slots = sorted(at for at in (reading.first_text_at(p) for p in probes) if at is not None)

    def allowed_at(calls: int) -> float:
        ideal = first_ready + max(limit.seconds_for(calls) for limit in limits) * time_scale
        if own_slots and calls <= len(slots):
            return max(ideal, slots[calls - 1] - overhead_s)
        return ideal

    shown = _ideal_first_posts(ordered, allowed_at)
    out = []
    for position, probe in enumerate(ordered, start=1):
        first = reading.first_text_at(probe)
        first_s = (first - probe.sent_at) if first is not None else math.inf
        out.append((position, first_s, shown[probe.tag] + overhead_s - probe.sent_at, probe))
    return out


def _asked_at(probe: Probe) -> float:
    try:
        return float(probe.question_ts)
    except ValueError:
        return probe.sent_at


def _ideal_first_posts(ordered: list[Probe], allowed_at: Any) -> dict[str, float]:
    """When each answer's first post would go (by tag): the k-th post no sooner than `allowed_at(k)` nor than the one
    before, to the oldest answer ready by then (or, when none is, the first to be ready)."""
    waiting = list(enumerate(ordered))
    shown: dict[str, float] = {}
    previous = -math.inf
    for calls in range(1, len(ordered) + 1):
        at = max(allowed_at(calls), previous)
        ready = [(age, p) for age, p in waiting if p.model_first_token_at <= at]
        if not ready:
            at = min(p.model_first_token_at for _, p in waiting)
            ready = [(age, p) for age, p in waiting if p.model_first_token_at <= at]
        chosen = min(ready, key=lambda entry: entry[0])
        waiting.remove(chosen)
        shown[chosen[1].tag] = previous = at
    return shown


async def wait_until(condition: Any, limit_s: float) -> bool:
    """Polls `condition` (a function, its result awaited when it is a coroutine) every 50 ms for up to `limit_s`."""
    async def holds() -> bool:
        met = condition()
        return bool(await met if inspect.isawaitable(met) else met)

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if await holds():
            return True
        await asyncio.sleep(0.05)
    return await holds()


@dataclass(frozen=True, kw_only=True)
class NativeTally:
    """The adapter's native streaming counts (adapters/slack/native_streaming.py NativeCounts)."""

    native: int = 0
    fell_back: int = 0
    post_update: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class BotReading:
    """What the bench reads off its bot process: one JSON line of bench/slack_stream_bot.py."""

    inflight_answers: int
    active_runs: int
    native: NativeTally
    workspace_posts: Limit | None = None  # the bot's workspace posting budget, when asked for a team

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> BotReading:
        budget = values.get("workspace_posts")
        return cls(inflight_answers=int(values["inflight_answers"]), active_runs=int(values["active_runs"]),
                   native=NativeTally(**values["native"]), workspace_posts=Limit(**budget) if budget else None)


# How often the bench's own loop is sampled while a burst comes in (real seconds).
LAG_TICK_S = 0.005


class LoopLag:
    """The bench process's event loop lag for `window_s` from now (how late a short sleep woke), sampled in the
    background: what the emulator's own timestamps may be late by."""

    def __init__(self, window_s: float) -> None:
        self.worst_s = 0.0
        self._until = time.monotonic() + window_s
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def _sample(self) -> None:
        while time.monotonic() < self._until:
            before = time.monotonic()
            await asyncio.sleep(LAG_TICK_S)
            self.worst_s = max(self.worst_s, time.monotonic() - before - LAG_TICK_S)

    def stop(self) -> None:
        self._task.cancel()


class BotError(RuntimeError):
    """The bot process did not answer, or exited."""


class BotProcess:
    """bench/slack_stream_bot.py as a child: started with its options, read and stopped over its stdin and stdout,
    its log (stderr) appended to `log_path`. Every wait is bounded; `kill` ends it on any path out."""

    def __init__(self, log_path: Path, *, name: str, args: list[str], env: dict[str, str]) -> None:
        self.log_path = log_path
        self.name = name
        self._args = args
        self._env = {**os.environ, "PYTHONPATH": str(REPO), **env}
        self._process: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()  # one request and its answer at a time
        self.port = 0

    async def start(self) -> int:
        """Starts the bot; returns its HTTP port once it takes events."""
        with self.log_path.open("ab") as log:
            log.write(f"==== {self.name}: bot started at {time.strftime('%H:%M:%S')} ====\n".encode())
            log.flush()
            self._process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.slack_stream_bot", *self._args, cwd=str(REPO), env=self._env,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
            )
        ready = await self._receive(BOT_READY_LIMIT_S, "start")
        self.port = int(ready["port"])
        return self.port

    async def read(self, team: str | None = None) -> BotReading:
        """The bot's reading now; with `team`, its workspace posting budget too."""
        return BotReading.from_json(await self.request({"op": "read", "team": team}, BOT_ANSWER_LIMIT_S))

    async def stop(self) -> BotReading:
        """A clean stop (stop_accepting, close, the server's stop); its last reading. Then waits for the exit."""
        final = BotReading.from_json(await self.request({"op": "stop"}, BOT_STOP_LIMIT_S))
        assert self._process is not None
        try:
            await asyncio.wait_for(self._process.wait(), BOT_EXIT_LIMIT_S)
        except asyncio.TimeoutError:
            raise BotError(f"{self.name}: the bot did not exit within {BOT_EXIT_LIMIT_S:g} s of its stop") from None
        return final

    async def request(self, message: dict[str, Any], limit_s: float) -> dict[str, Any]:
        process = self._running()
        async with self._lock:
            assert process.stdin is not None
            try:
                process.stdin.write(json.dumps(message).encode() + b"\n")
                await asyncio.wait_for(process.stdin.drain(), limit_s)
            except (ConnectionError, asyncio.TimeoutError) as error:
                raise BotError(f"{self.name}: cannot send {message!r} to the bot ({error!r})") from None
            return await self._receive(limit_s, message.get("op", "?"))

    async def _receive(self, limit_s: float, what: str) -> dict[str, Any]:
        process = self._running()
        assert process.stdout is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), limit_s)
        except asyncio.TimeoutError:
            raise BotError(f"{self.name}: no answer to {what} within {limit_s:g} s; see {self.log_path}") from None
        if not line:
            code = await asyncio.wait_for(process.wait(), limit_s)
            raise BotError(f"{self.name}: the bot exited ({code}) before answering {what}; see {self.log_path}")
        answer = json.loads(line)
        if "error" in answer:
            raise BotError(f"{self.name}: {answer['error']}")
        return answer

    def _running(self) -> asyncio.subprocess.Process:
        if self._process is None:
            raise BotError(f"{self.name}: the bot is not started")
        return self._process

    async def kill(self) -> None:
        """SIGKILL if it still runs (a stop that failed, or the bench leaving on an error)."""
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            await self._process.wait()


def tracebacks(log_path: Path) -> list[str]:
    """Each traceback in the bot's log, to its first line that is not indented (the exception)."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    found = []
    for n, line in enumerate(lines):
        if line.startswith(TRACEBACK):
            end = n + 1
            while end < len(lines) and (lines[end].startswith(" ") or not lines[end].strip()):
                end += 1
            found.append("\n".join(lines[n:end + 1]))
    return found
