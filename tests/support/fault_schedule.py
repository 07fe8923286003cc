"""Seeded fault schedules for the delivery fault-injection test: which calls of one answer meet a 429, a lost reply or a
dropped connection, whether its process dies and at which call, and whether its database blips."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from tests.emulators.discord.faults import PlannedFault
from tests.emulators.slack.limits import CallFault

FaultKind = Literal["ratelimited", "dropped", "lost", "error_after_work"]
CrashMode = Literal["after_work", "before_work"]  # the call at the crash: done by the platform, or never read
BlipKind = Literal["refused", "dropped"]  # writes refused for a while, or every open connection terminated
FAULT_KINDS: tuple[FaultKind, ...] = ("ratelimited", "ratelimited", "lost", "dropped", "error_after_work")
# Calls an answer of two or three parts makes in all (posts, edits, look-ups, repair): faults land within them.
CALL_HORIZON = 10
MAX_FAULTS = 5
CRASH_SHARE = 0.4
BLIP_SHARE = 0.25
NATIVE_SHARE = 0.3
REST_AT_ONCE_SHARE = 0.15
REST_AFTER_S = 0.03
WORDS = (
    "backup", "cluster", "restart", "the", "queue", "drains", "before", "noon", "and", "every", "replica", "keeps",
    "fourteen", "days", "of", "logs", "while", "deploys", "wait", "for", "green", "checks", "on", "main",
)


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """One seeded schedule: the answer (its text and the deltas the model streams it in) and what goes wrong.

    Call numbers count every platform call in the answer's channel, 1-based, across the processes that touch it
    (the one that streams it and the one that delivers or repairs after a crash)."""

    seed: int
    platform: str
    answer: str
    pieces: tuple[str, ...]
    faults: dict[int, FaultKind]
    retry_after: dict[int, float]  # platform seconds a 429 asks for, by call number
    crash_at: int | None
    crash_mode: CrashMode
    blip_at: int | None
    blip: BlipKind
    blip_s: float
    native: bool  # Slack: streamed natively (chat.startStream / appendStream / stopStream), not post+update
    first_pause_s: float = 0.0  # the model's pause after its first delta (the first message is posted meanwhile)

    def describe(self) -> str:
        faults = ", ".join(f"#{n} {kind}" for n, kind in sorted(self.faults.items())) or "none"
        crash = f"crash at #{self.crash_at} ({self.crash_mode})" if self.crash_at else "no crash"
        blip = f"db {self.blip} at #{self.blip_at} for {self.blip_s:.2f} s" if self.blip_at else "no db blip"
        way = " streamed natively" if self.native else ""
        return (f"{self.platform} seed {self.seed}: {len(self.answer)} chars{way} in {len(self.pieces)} deltas; "
                f"faults {faults}; {crash}; {blip}")


def schedule_for(seed: int, platform: str, *, part_chars: int) -> Schedule:
    """The schedule of `seed` on `platform`; `part_chars`: how much one message holds there (answers need 2-3)."""
    rng = random.Random(f"{platform}:{seed}")
    answer = _answer(rng, chars=int(part_chars * rng.uniform(1.1, 2.3)))
    pieces: list[str] = []
    at = 0
    while at < len(answer):
        size = rng.randint(20, 600)
        pieces.append(answer[at : at + size])
        at += size
    faults: dict[int, FaultKind] = {}
    retry_after: dict[int, float] = {}
    for _ in range(rng.randint(0, MAX_FAULTS)):
        call = rng.randint(1, CALL_HORIZON)
        faults[call] = rng.choice(FAULT_KINDS)
        retry_after[call] = rng.choice((0.5, 1.0, 2.0, 3.0))
    crash_at = rng.randint(1, CALL_HORIZON) if rng.random() < CRASH_SHARE else None
    crash_mode: CrashMode = rng.choice(("after_work", "before_work"))
    if crash_at is not None:
        faults.pop(crash_at, None)
    blip_at = rng.randint(1, CALL_HORIZON) if rng.random() < BLIP_SHARE else None
    blip: BlipKind = rng.choice(("refused", "dropped"))
    blip_s = rng.uniform(0.05, 0.4)
    first_pause_s = 0.0
    native = platform == "slack" and rng.random() < NATIVE_SHARE
    if rng.random() < REST_AT_ONCE_SHARE:
        # A few words, then the rest in one delta as the run ends (a model that stalls, a run finishing its tools):
        # every later part of the final goes out at once, on a budget that may not hold them all.
        cut = rng.randint(20, 200)
        pieces = [answer[:cut], answer[cut:]]
        first_pause_s = REST_AFTER_S
    return Schedule(
        seed=seed, platform=platform, answer=answer, pieces=tuple(pieces), faults=faults, retry_after=retry_after,
        crash_at=crash_at, crash_mode=crash_mode, blip_at=blip_at, blip=blip, blip_s=blip_s, native=native,
        first_pause_s=first_pause_s,
    )


def _answer(rng: random.Random, *, chars: int) -> str:
    """Sentences in paragraphs, `chars` long or a little more: plain text every platform shows as written."""
    paragraphs: list[str] = []
    total = 0
    while total < chars:
        sentences = []
        for _ in range(rng.randint(2, 6)):
            words = rng.choices(WORDS, k=rng.randint(5, 16))
            sentences.append(" ".join(words).capitalize() + f" ({rng.randint(1, 999)}).")
        paragraph = " ".join(sentences)
        paragraphs.append(paragraph)
        total += len(paragraph) + 2
    return "\n\n".join(paragraphs)


@dataclass(kw_only=True, eq=False)
class ChannelPlan:
    """A schedule at work in one channel: counts its calls and says what each meets."""

    schedule: Schedule
    time_scale: float  # real seconds per platform second, for Retry-After
    on_blip: Callable[[], Awaitable[None]]
    calls: int = 0
    fired: list[str] = field(default_factory=list)
    crashed: asyncio.Event = field(default_factory=asyncio.Event)
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    def decide(self, call: str) -> tuple[FaultKind, float] | None:
        self.calls += 1
        n = self.calls
        schedule = self.schedule
        if n == schedule.blip_at:
            self.fired.append(f"#{n} {call}: db {schedule.blip}")
            task = asyncio.get_running_loop().create_task(self.on_blip())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        if n == schedule.crash_at and not self.crashed.is_set():
            self.fired.append(f"#{n} {call}: crash ({schedule.crash_mode})")
            self.crashed.set()
            return ("dropped", 0.0) if schedule.crash_mode == "before_work" else None
        kind = schedule.faults.get(n)
        if kind is None:
            return None
        self.fired.append(f"#{n} {call}: {kind}")
        return kind, schedule.retry_after.get(n, 1.0) * self.time_scale


class FaultPlan:
    """Every channel's schedule, for the emulators' `fault_plan` hooks; calls elsewhere pass untouched."""

    def __init__(self) -> None:
        self.channels: dict[str, ChannelPlan] = {}

    def arm(self, channel: str, plan: ChannelPlan) -> None:
        self.channels[channel] = plan

    def disarm(self, channel: str) -> None:
        self.channels.pop(channel, None)

    def slack(self, method: str, params: dict[str, object]) -> CallFault | None:
        plan = self.channels.get(str(params.get("channel") or ""))
        decided = plan.decide(method) if plan is not None else None
        return None if decided is None else CallFault(kind=decided[0], retry_after_s=decided[1])

    def discord(self, route: str, channel_id: str) -> PlannedFault | None:
        plan = self.channels.get(channel_id)
        decided = plan.decide(route) if plan is not None else None
        return None if decided is None else PlannedFault(kind=decided[0], retry_after_s=decided[1])
