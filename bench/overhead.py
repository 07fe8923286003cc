"""What the overhead benches share: the scripted reply, the engine-side consumer, and overhead from medians."""

from __future__ import annotations

import statistics
import time
import uuid

from core.engine import Engine
from core.events import AnswerDelta, Done
from core.requests import Actor, ConversationKey, Request
from tests.emulators.openai_server import OpenAIEmulator, Text

STREAM_TOKENS = 2_000
TOKEN_CHARS = 4  # one emulator chunk per "token"
RUNS = 9


def reply(tokens: int) -> Text:
    return Text("tok " * tokens, chunk_chars=TOKEN_CHARS)


async def engine_stream(engine: Engine, emulator: OpenAIEmulator, tokens: int) -> float:
    """Seconds for engine.ask() on a fresh conversation (history, lock, agent, stream, persistence),
    keeping the text deltas as any consumer would."""
    emulator.script(reply(tokens))
    request = Request(
        question="bench question",
        conversation=ConversationKey(platform="bench", workspace="W", channel=f"C{uuid.uuid4().hex[:12]}"),
        user=Actor(id="U1", name="bench"),
    )
    started = time.perf_counter()
    parts = []
    last = None
    async for event in engine.ask(request):
        if isinstance(event, AnswerDelta):
            parts.append(event.text)
        last = event
    elapsed = time.perf_counter() - started
    assert isinstance(last, Done) and len(last.answer) == tokens * TOKEN_CHARS, last
    assert "".join(parts) == last.answer
    return elapsed


def added(samples: dict[str, list[float]], *, base: str, measured: str) -> dict[str, float]:
    """Medians of `samples` (keys `<name>_long` / `<name>_short`), and what `measured` adds over `base`:
    a fixed cost per request (from one-token answers) and a cost per token (from STREAM_TOKENS-token ones)."""
    med = {name: statistics.median(values) for name, values in samples.items()}
    fixed_s = med[f"{measured}_short"] - med[f"{base}_short"]
    per_token_s = ((med[f"{measured}_long"] - med[f"{base}_long"]) - fixed_s) / (STREAM_TOKENS - 1)
    return {**med, "fixed_ms": fixed_s * 1e3, "per_token_us": per_token_s * 1e6}


def verdict(value: float, target: float) -> str:
    return "ok" if value <= target else "MISSES TARGET"
