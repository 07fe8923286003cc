"""Tests for adapters.streaming: splitting, the shared rate budget, and the message streamer."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from adapters.streaming import (
    MessageStreamer,
    MonotonicClock,
    Priority,
    RateBudget,
    RateLimited,
    StreamLimits,
    TransientSendError,
    split_for_limit,
    split_parts,
)
from adapters.streaming.transport import PermanentSendError
from adapters.streaming.fair_queue import SHOWN_TEXT_FINAL_DEFER_S
from adapters.streaming.learned_rate import LEARNED_RATE_UNDER_MEASURED
from adapters.streaming.rate_budget import PLATFORM_BURST_RESERVE_CALLS
from tests.adapters.streaming_fakes import FakeClock, MemoryTransport

pytestmark = pytest.mark.timeout(30)

CURSOR = " ▌"
PLACEHOLDER = "_thinking…_"


def words(count: int) -> str:
    """Prose with paragraph breaks, deterministic."""
    vocabulary = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    out: list[str] = []
    for index in range(count):
        out.append(vocabulary[(index * 7) % len(vocabulary)])
        out.append("\n\n" if index % 40 == 39 else ("\n" if index % 13 == 12 else " "))
    return "".join(out)


def code_answer() -> str:
    code = "".join(f"    value_{index} = compute({index}, 'x')\n" for index in range(60))
    return "Here is the code:\n\n```python\ndef f():\n" + code + "```\n\nThat is all, thanks."


def make_streamer(
    clock: FakeClock,
    transport: MemoryTransport,
    *,
    max_chars: int = 400,
    edit_budget: RateBudget | None = None,
    post_budget: RateBudget | None = None,
    key: str | None = None,
    on_message_posted=None,
    on_final_pending=None,
) -> MessageStreamer:
    return MessageStreamer(
        transport,
        limits=StreamLimits(max_chars=max_chars),
        edit_budget=edit_budget or RateBudget(capacity=100, refill_per_s=100, clock=clock),
        post_budget=post_budget or RateBudget(capacity=100, refill_per_s=100, clock=clock),
        clock=clock,
        key=key,
        on_message_posted=on_message_posted,
        on_final_pending=on_final_pending,
    )


async def stream_tokens(
    clock: FakeClock, streamer: MessageStreamer, text: str, *, size: int, gap_s: float
) -> None:
    for start in range(0, len(text), size):
        streamer.append(text[start : start + size])
        await clock.sleep(gap_s)


def assert_fences_balanced(text: str) -> None:
    assert text.count("```") % 2 == 0, text


# --- splitting ---


def test_short_text_is_one_part() -> None:
    assert split_for_limit("hello world", 100) == ["hello world"]


def test_long_prose_splits_at_boundaries_without_losing_text() -> None:
    text = words(2000)
    parts = split_parts(text, 500)
    assert len(parts) > 10
    assert all(len(part.text) <= 500 for part in parts)
    assert "".join(part.body for part in parts) == text
    for part in parts[:-1]:
        assert part.body[-1] in " \n", "cut inside a word"
    assert [part.text for part in parts] == split_for_limit(text, 500)


def test_paragraph_breaks_are_preferred() -> None:
    text = ("word " * 50 + "\n\n") * 10
    for part in split_parts(text, 600)[:-1]:
        assert part.body.endswith("\n\n")


def test_a_word_is_cut_only_when_there_is_no_space() -> None:
    text = "x" * 1000
    parts = split_for_limit(text, 100)
    assert all(len(part) <= 100 for part in parts)
    assert "".join(parts) == text


def test_code_fence_is_closed_and_reopened_across_parts() -> None:
    text = code_answer()
    parts = split_parts(text, 300)
    assert len(parts) > 3
    assert "".join(part.body for part in parts) == text
    for part in parts:
        assert len(part.text) <= 300
        assert_fences_balanced(part.text)
    inside = [part for part in parts[1:] if part.reopen]
    assert inside and all(part.reopen == "```python\n" for part in inside)
    assert parts[0].close.endswith("```") and parts[0].fence_after == "python"


def test_fence_left_open_by_the_text_is_closed_in_the_last_part() -> None:
    [part] = split_parts("look:\n```\nprint(1)\n", 100)
    assert part.text == "look:\n```\nprint(1)\n```"


def test_text_starting_inside_a_block_is_reopened() -> None:
    parts = split_parts("still code\n```\nprose after", 100, start_fence="sh")
    assert parts[0].text == "```sh\nstill code\n```\nprose after"


def test_tiny_limit_is_refused() -> None:
    with pytest.raises(ValueError):
        split_for_limit("text", 10)


# --- the rate budget ---


async def test_budget_bursts_then_refills_at_its_rate() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=2, refill_per_s=1, clock=clock)

    async def scenario() -> list[float]:
        times = []
        for _ in range(5):
            await budget.acquire(Priority.FIRST, "a")
            times.append(clock.now())
        return times

    assert await clock.run(scenario()) == pytest.approx([0, 0, 1, 2, 3])


async def test_intermediate_edits_keep_a_call_in_reserve_for_a_final() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=2, refill_per_s=1, clock=clock)

    async def scenario() -> tuple[list[float], float, bool]:
        times = []
        for _ in range(3):
            await budget.acquire(Priority.INTERMEDIATE, "a")
            times.append(clock.now())
        # An edit waits for the bucket to hold two calls again; a final arriving meanwhile goes at once.
        waiting = asyncio.create_task(budget.acquire(Priority.INTERMEDIATE, "a"))
        await clock.sleep(0.25)
        started = clock.now()
        await budget.acquire(Priority.FINAL, "b")
        final_wait = clock.now() - started
        now_or_never = budget.try_acquire(Priority.FINAL)  # the reserve is spent: nothing left now
        await waiting
        return times, final_wait, now_or_never

    times, final_wait, now_or_never = await clock.run(scenario())
    assert times == pytest.approx([0, 1, 2]), "each edit leaves one call in the bucket"
    assert final_wait == pytest.approx(0) and not now_or_never


async def test_a_final_takes_the_reserve_with_try_acquire_even_while_edits_wait() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=2, refill_per_s=0.1, clock=clock)

    async def scenario() -> tuple[bool, bool]:
        await budget.acquire(Priority.INTERMEDIATE, "a")  # one left: the reserve
        waiting = asyncio.create_task(budget.acquire(Priority.INTERMEDIATE, "a"))
        await clock.sleep(0.1)
        typing = budget.try_acquire()  # a courtesy call: not while anyone waits
        final = budget.try_acquire(Priority.FINAL, shows_text=True)
        waiting.cancel()
        return typing, final

    assert await clock.run(scenario()) == (False, True)


async def test_channel_budgets_share_their_parents_limit_and_a_429_pauses_both() -> None:
    clock = FakeClock()
    workspace = RateBudget(capacity=1, refill_per_s=1, clock=clock)
    first = RateBudget(capacity=5, refill_per_s=5, clock=clock, parent=workspace)
    second = RateBudget(capacity=5, refill_per_s=5, clock=clock, parent=workspace)

    async def scenario() -> list[float]:
        times = []
        for budget in (first, second, first):
            await budget.acquire(Priority.FINAL, "a")
            times.append(clock.now())
        second.penalize(10.0)  # the 429 came through one channel; the workspace waits too
        await first.acquire(Priority.FINAL, "a")
        times.append(clock.now())
        return times

    assert await clock.run(scenario()) == pytest.approx([0, 1, 2, 12])


async def test_a_learning_budget_halves_its_rate_on_each_overload_and_grows_back_when_quiet() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=10, refill_per_s=2.0, clock=clock, learns=True, known_limit=False)

    async def quiet(seconds: float) -> None:
        await clock.sleep(seconds)
        await budget.acquire(Priority.INTERMEDIATE, "a")

    budget.penalize(1.0)
    budget.penalize(1.0)  # answered during the same pause: the same overload
    assert budget.refill_per_s == pytest.approx(1.0) and budget.capacity == pytest.approx(5.0)
    await clock.run(quiet(1.0))
    budget.penalize(1.0)  # too few calls seen to tell the limit: halves
    assert budget.refill_per_s == pytest.approx(0.5) and budget.capacity == pytest.approx(2.5)

    await clock.run(quiet(61.0))
    assert budget.refill_per_s == pytest.approx(0.625)
    for _ in range(20):
        await clock.run(quiet(61.0))
    assert budget.refill_per_s == pytest.approx(2.0) and budget.capacity == pytest.approx(10.0)


async def test_a_learning_budget_settles_just_under_a_per_minute_limit_it_was_not_told() -> None:
    """A server accepting 100 calls a minute (fixed windows) that also answers every 20th call 429 at
    random: a budget guessing 600 a minute soon sends near the limit and few calls are refused."""
    clock = FakeClock()
    budget = RateBudget(capacity=10, refill_per_s=10.0, clock=clock, learns=True, known_limit=False)
    limit, minutes = 100, 10
    accepted_in: dict[int, int] = {}
    refused = 0
    calls = 0

    async def call() -> None:
        nonlocal refused, calls
        await budget.acquire(Priority.FIRST, "a")
        calls += 1
        window = int(clock.now() // 60)
        if calls % 20 == 0:
            refused += 1
            budget.penalize(2.0)
        elif accepted_in.get(window, 0) >= limit:
            refused += 1
            budget.penalize((window + 1) * 60 - clock.now())
        else:
            accepted_in[window] = accepted_in.get(window, 0) + 1

    async def scenario() -> None:
        while clock.now() < minutes * 60:
            await call()

    await clock.run(scenario(), max_virtual_s=minutes * 60 + 120)
    accepted = sum(count for window, count in accepted_in.items() if window < minutes)
    assert accepted >= 0.8 * limit * minutes
    assert refused <= 0.1 * calls


async def test_an_unknown_limit_is_measured_by_two_overloads_close_together() -> None:
    """The calls accepted between two 429s, over the time between them, are the platform's rate: the
    second slows down to just under it (and a tenth at least), and quiet minutes grow the rate back only
    that far until the measure is old."""
    clock = FakeClock()
    budget = RateBudget(capacity=10, refill_per_s=4.5, clock=clock, learns=True, known_limit=False)
    budget.penalize(1.0)
    assert budget.refill_per_s == pytest.approx(2.25)  # one overload says nothing of the rate: halves
    granted = 0

    async def send_until(moment: float) -> None:
        nonlocal granted
        while clock.now() < moment:
            await budget.acquire(Priority.FIRST, "a")
            granted += 1

    await clock.run(send_until(9.0))  # before a quiet stretch would grow the rate back
    elapsed = clock.now()
    budget.penalize(1.0)
    measured = (granted - 1) / elapsed  # the call the second 429 answered was not accepted
    assert 2.25 * 0.5 < measured * LEARNED_RATE_UNDER_MEASURED < 2.25 * 0.9
    assert budget.refill_per_s == pytest.approx(measured * LEARNED_RATE_UNDER_MEASURED)

    async def quiet(seconds: float) -> None:
        await clock.sleep(seconds)
        await budget.acquire(Priority.INTERMEDIATE, "a")

    for _ in range(2):
        await clock.run(quiet(61.0))
    assert budget.refill_per_s == pytest.approx(measured)  # not past the measure while it is fresh
    for _ in range(10):
        await clock.run(quiet(61.0))
    assert budget.refill_per_s == pytest.approx(4.5)


async def test_a_told_limit_slows_a_tenth_per_overload_and_grows_back_to_the_told_rate() -> None:
    """A limit the operator told: a 429 is likelier noise than a wrong number. Each overload slows it by a
    tenth, never below the floor it was given, and a quiet stretch takes it back to the told rate."""
    clock = FakeClock()
    budget = RateBudget(capacity=10, refill_per_s=4.5, clock=clock, learns=True, learned_floor_per_s=4.5 / 2)

    async def sends(count: int) -> None:
        for _ in range(count):
            await budget.acquire(Priority.FIRST, "a")

    budget.penalize(1.0)
    assert budget.refill_per_s == pytest.approx(4.5 * 0.9)
    for _ in range(10):
        await clock.run(sends(5))
        budget.penalize(1.0)
    assert budget.refill_per_s == pytest.approx(4.5 / 2)

    async def quiet(seconds: float) -> None:
        await clock.sleep(seconds)
        await budget.acquire(Priority.INTERMEDIATE, "a")

    for _ in range(4):
        await clock.run(quiet(11.0))
    assert budget.refill_per_s == pytest.approx(4.5)


async def test_budget_serves_finals_then_firsts_then_intermediates() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=1, refill_per_s=1, clock=clock)
    order: list[str] = []

    async def want(name: str, priority: Priority) -> None:
        await budget.acquire(priority, name)
        order.append(name)

    async def scenario() -> None:
        await budget.acquire(Priority.FINAL, "warm")  # empties the bucket
        tasks = []
        for name, priority in [
            ("edit-a", Priority.INTERMEDIATE),
            ("first-b", Priority.FIRST),
            ("final-c", Priority.FINAL),
            ("edit-d", Priority.INTERMEDIATE),
            ("final-e", Priority.FINAL),
        ]:
            tasks.append(asyncio.create_task(want(name, priority)))
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)

    await clock.run(scenario())
    assert order == ["final-c", "final-e", "first-b", "edit-a", "edit-d"]


async def test_budget_rotates_intermediates_between_requesters() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=1, refill_per_s=1, clock=clock)
    order: list[str] = []

    async def want(key: str) -> None:
        await budget.acquire(Priority.INTERMEDIATE, key)
        order.append(key)

    async def scenario() -> None:
        await budget.acquire(Priority.INTERMEDIATE, "warm")
        tasks = []
        for key in ["a", "a", "a", "b", "c"]:
            tasks.append(asyncio.create_task(want(key)))
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)

    await clock.run(scenario())
    assert order == ["a", "b", "c", "a", "a"]


async def test_penalize_pauses_the_whole_bucket() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=5, refill_per_s=1, clock=clock)

    async def scenario() -> list[float]:
        budget.penalize(10)
        times = []
        for priority in (Priority.FINAL, Priority.INTERMEDIATE):
            await budget.acquire(priority, "a")
            times.append(clock.now())
        return times

    # The pause ends with the one call promised; the edit then waits for that call plus one in reserve.
    assert await clock.run(scenario()) == pytest.approx([10, 12])


async def test_a_cancelled_wait_takes_no_token() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=1, refill_per_s=1, clock=clock)

    async def scenario() -> float:
        await budget.acquire(Priority.FINAL, "warm")
        abandoned = asyncio.create_task(budget.acquire(Priority.FINAL, "gone"))
        await asyncio.sleep(0)
        abandoned.cancel()
        await budget.acquire(Priority.INTERMEDIATE, "b")
        return clock.now()

    assert await clock.run(scenario()) == pytest.approx(1)


async def test_per_minute_budget_keeps_every_window_within_the_limit() -> None:
    clock = FakeClock()
    budget = RateBudget.per_minute(50, clock=clock)
    times: list[float] = []

    async def scenario() -> None:
        while clock.now() < 300:
            await budget.acquire(Priority.INTERMEDIATE, "a")
            times.append(clock.now())

    await clock.run(scenario())
    for index, start in enumerate(times):
        in_window = [t for t in times[index:] if t < start + 60]
        assert len(in_window) <= 50
    assert len(times) >= 0.85 * 50 * 5


async def test_per_minute_takes_a_share() -> None:
    budget = RateBudget.per_minute(50, share=0.5, clock=FakeClock())
    assert budget.capacity + budget.refill_per_s * 60 == pytest.approx(25)


async def test_per_minute_with_a_platform_burst_never_outruns_the_platform_bucket() -> None:
    # The platform: a token bucket of 10 calls refilled at 50 a minute (Slack's chat.update).
    clock = FakeClock()
    budget = RateBudget.per_minute(50, clock=clock, platform_burst=10)
    times: list[float] = []

    async def scenario() -> None:
        while clock.now() < 300:
            await budget.acquire(Priority.INTERMEDIATE, "a")
            times.append(clock.now())

    await clock.run(scenario())
    tokens, last = 10.0, 0.0
    for at in times:
        tokens = min(10.0, tokens + (at - last) * 50 / 60)
        last = at
        # The reserve stays unspent, so calls reaching the platform bunched up still fit.
        assert tokens >= 1 + PLATFORM_BURST_RESERVE_CALLS - 1e-6
        tokens -= 1
    assert budget.capacity == pytest.approx(10 - PLATFORM_BURST_RESERVE_CALLS)
    assert len(times) >= 0.97 * 50 * 5


async def test_per_minute_platform_burst_takes_a_share() -> None:
    budget = RateBudget.per_minute(50, share=0.5, clock=FakeClock(), platform_burst=10)
    assert budget.capacity == pytest.approx((10 - PLATFORM_BURST_RESERVE_CALLS) * 0.5)
    assert budget.refill_per_s * 60 < 25
    with pytest.raises(ValueError):
        RateBudget.per_minute(50, clock=FakeClock(), burst=5, platform_burst=10)


async def test_a_waiter_promoted_to_final_overtakes_first_texts() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=1, refill_per_s=1, clock=clock)
    order: list[str] = []
    ended = asyncio.Event()

    async def want(name: str, priority: Priority, promote: asyncio.Event | None = None) -> None:
        await budget.acquire(priority, name, promote=promote)
        order.append(name)

    async def scenario() -> None:
        await budget.acquire(Priority.FINAL, "warm")
        tasks = [
            asyncio.create_task(want("first-a", Priority.FIRST)),
            asyncio.create_task(want("first-b", Priority.FIRST)),
            asyncio.create_task(want("edit-c", Priority.INTERMEDIATE, ended)),
        ]
        await asyncio.sleep(0)
        ended.set()  # c's answer ended while its edit waited
        await asyncio.gather(*tasks)

    await clock.run(scenario())
    assert order == ["edit-c", "first-a", "first-b"]


async def test_finals_that_are_first_texts_go_before_finals_over_shown_text() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=1, refill_per_s=1, clock=clock)
    order: list[str] = []

    async def want(name: str, shows_text: bool) -> None:
        await budget.acquire(Priority.FINAL, name, shows_text=shows_text)
        order.append(name)

    async def scenario() -> None:
        await budget.acquire(Priority.FINAL, "warm")
        tasks = [
            asyncio.create_task(want("shown-a", True)),
            asyncio.create_task(want("placeholder-b", False)),
            asyncio.create_task(want("first-c", False)),
        ]
        await asyncio.sleep(0)
        await asyncio.gather(*tasks)

    await clock.run(scenario())
    assert order == ["placeholder-b", "first-c", "shown-a"]


async def test_a_final_over_shown_text_is_deferred_only_for_a_bounded_time() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=1, refill_per_s=0.1, clock=clock)
    served: dict[str, float] = {}

    async def want(name: str, shows_text: bool) -> None:
        await budget.acquire(Priority.FINAL, name, shows_text=shows_text)
        served[name] = clock.now()

    async def scenario() -> None:
        await budget.acquire(Priority.FINAL, "warm")
        shown = asyncio.create_task(want("shown", True))
        newcomers = []
        # A first-text final every 5 s, faster than the 10 s refill: an endless queue.
        for index in range(40):
            newcomers.append(asyncio.create_task(want(f"new-{index}", False)))
            await clock.sleep(5)
        await asyncio.gather(shown, *newcomers)

    await clock.run(scenario(), max_virtual_s=2000)
    # Only finals requested within the deferral went ahead; every later one waits its turn.
    for index in range(40):
        requested_at = 5 * index
        if requested_at < SHOWN_TEXT_FINAL_DEFER_S:
            assert served[f"new-{index}"] < served["shown"]
        else:
            assert served[f"new-{index}"] > served["shown"]


async def test_a_released_token_goes_to_the_next_waiter() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=1, refill_per_s=0.01, clock=clock)

    async def scenario() -> float:
        await budget.acquire(Priority.FINAL, "held")
        waiting = asyncio.create_task(budget.acquire(Priority.FIRST, "b"))
        await clock.sleep(1)
        budget.release()
        await waiting
        return clock.now()

    assert await clock.run(scenario()) == pytest.approx(1)


# --- the streamer ---


async def test_a_quick_first_text_is_posted_with_its_text_and_no_placeholder() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def scenario() -> list[str]:
        await streamer.start()
        await clock.sleep(0.5)
        streamer.append("Hello")
        await clock.sleep(0.5)
        streamer.append(" world")
        return await streamer.finish()

    ids = await clock.run(scenario())
    assert ids == ["m1"] == streamer.message_ids
    assert PLACEHOLDER not in [call.text for call in transport.calls]
    first = transport.calls[0]
    assert (first.op, first.text) == ("post", "Hello" + CURSOR)
    # The first text went out at once, not after the edit interval.
    assert first.at < 0.5 + 0.2
    assert transport.texts == {"m1": "Hello world"}


async def test_a_late_first_text_gets_the_placeholder_meanwhile_then_text_then_final() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def scenario() -> list[str]:
        await streamer.start()
        streamer.set_status("🔧 Running calculator…")  # a status line alone waits like the placeholder
        await clock.sleep(0.9)
        assert transport.calls == []
        streamer.set_status(None)
        await clock.sleep(0.6)
        streamer.append("Hello")
        await clock.sleep(0.5)
        streamer.append(" world")
        return await streamer.finish()

    assert await clock.run(scenario()) == ["m1"]
    first, second = transport.calls[0], transport.calls[1]
    assert (first.op, first.text) == ("post", PLACEHOLDER)
    assert first.at == pytest.approx(1.0 + transport.latency_s), "posted once the first text was late"
    assert (second.op, second.text) == ("edit", "Hello" + CURSOR)
    assert second.at < 1.5 + 0.2, "the first text replaced it at once"
    assert transport.texts == {"m1": "Hello world"}


async def test_an_answer_ending_before_its_first_text_was_due_is_posted_once() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def scenario() -> None:
        await streamer.start()
        await clock.sleep(0.3)
        await streamer.finish("the whole answer")

    await clock.run(scenario())
    assert [(call.op, call.text) for call in transport.calls] == [("post", "the whole answer")]


async def test_a_lone_answer_on_a_tight_budget_gets_its_final_at_once() -> None:
    """Discord's channel budget (a burst of 2, then 0.4 calls a second): the streaming edits never spend
    the call the final needs, so it goes when the answer ends, not a refill later."""
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    budget = RateBudget(capacity=2, refill_per_s=0.4, clock=clock)
    streamer = make_streamer(clock, transport, max_chars=2000, edit_budget=budget, post_budget=budget)

    async def scenario() -> float:
        await streamer.start()
        await stream_tokens(clock, streamer, words(120), size=5, gap_s=0.1)
        ended = clock.now()
        await streamer.finish()
        return clock.now() - ended

    took = await clock.run(scenario())
    assert len([call for call in transport.calls if call.text.endswith(CURSOR)]) >= 4, "it streamed"
    assert took <= transport.latency_s + 1e-9
    assert transport.final_texts() == [words(120)]


async def test_append_never_waits_even_when_the_transport_hangs() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock, gate=asyncio.Event())
    streamer = make_streamer(clock, transport)
    assert not inspect.iscoroutinefunction(MessageStreamer.append)
    assert not inspect.iscoroutinefunction(MessageStreamer.set_status)

    async def scenario() -> None:
        await streamer.start()
        await clock.sleep(1)
        for index in range(1000):
            assert streamer.append(f"t{index} ") is None
        streamer.set_status("🔧 Running calculator…")
        await clock.sleep(5)
        assert transport.calls == [] and len(transport.attempt_times) == 1
        assert transport.gate is not None
        transport.gate.set()
        await streamer.finish()

    await clock.run(scenario())
    assert transport.final_texts()[-1].endswith("t999 ")


async def test_text_arriving_during_an_edit_is_coalesced_into_the_next() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def scenario() -> None:
        await streamer.start()
        await clock.sleep(0.5)
        transport.gate = asyncio.Event()
        streamer.append("first ")
        await clock.sleep(0.1)  # the first message (with this text) is now in flight, held at the gate
        for index in range(100):
            streamer.append(f"{index} ")
            await clock.sleep(0.01)
        transport.gate.set()
        await clock.sleep(3)
        expected = "first " + "".join(f"{index} " for index in range(100))
        assert [(call.op, call.text) for call in transport.calls] == [
            ("post", "first " + CURSOR), ("edit", expected + CURSOR)
        ]
        await streamer.finish()

    await clock.run(scenario())


async def test_edits_keep_the_minimum_interval_per_message() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport, max_chars=4000)

    async def scenario() -> None:
        await streamer.start()
        await stream_tokens(clock, streamer, words(200), size=4, gap_s=0.05)
        await streamer.finish()

    await clock.run(scenario())
    streamed = clock.now()
    edits = [call for call in transport.edits_of("m1") if call.op == "edit"][:-1]  # minus final
    gaps = [later.at - earlier.at for earlier, later in zip(edits[1:], edits[2:])]
    assert gaps and min(gaps) >= 1.0 - 1e-9
    assert len(edits) <= streamed / 1.0 + 2


async def test_ten_streamers_on_a_tight_budget_all_get_edits_and_finals() -> None:
    clock = FakeClock()
    edit_budget = RateBudget(capacity=1, refill_per_s=0.5, clock=clock)
    post_budget = RateBudget(capacity=1, refill_per_s=1, clock=clock)
    transports = [MemoryTransport(clock=clock) for _ in range(10)]
    streamers = [
        make_streamer(clock, t, edit_budget=edit_budget, post_budget=post_budget, key=f"s{i}")
        for i, t in enumerate(transports)
    ]
    text = "word " * 60

    async def scenario() -> None:
        for streamer in streamers:
            await streamer.start()
        await asyncio.gather(
            *(stream_tokens(clock, s, text, size=5, gap_s=0.5) for s in streamers)
        )
        for transport in transports:
            live = [c for c in transport.calls if c.text.endswith(CURSOR)]
            assert len(live) >= 2, "an answer starved"
        await asyncio.gather(*(s.finish() for s in streamers))

    await clock.run(scenario())
    assert all(t.final_texts() == [text] for t in transports)


async def test_a_finishing_answer_overtakes_streaming_ones() -> None:
    clock = FakeClock()
    edit_budget = RateBudget(capacity=1, refill_per_s=0.2, clock=clock)
    busy_transports = [MemoryTransport(clock=clock) for _ in range(5)]
    busy = [
        make_streamer(clock, t, edit_budget=edit_budget, key=f"b{i}")
        for i, t in enumerate(busy_transports)
    ]
    done_transport = MemoryTransport(clock=clock)
    done = make_streamer(clock, done_transport, edit_budget=edit_budget, key="done")

    async def scenario() -> float:
        for streamer in [*busy, done]:
            await streamer.start()
            streamer.append("some text")
        await clock.sleep(30)  # every busy answer now has an edit waiting for a token
        for streamer in busy:
            streamer.append(" more")
        await clock.sleep(1)
        done.append(" and the end")
        started = clock.now()
        await done.finish()
        finished = clock.now() - started
        await asyncio.gather(*(s.finish() for s in busy))
        return finished

    # One token every 5 s: the final needs at most the next one, not a turn after five edits.
    assert await clock.run(scenario()) <= 5.0 + 0.5
    assert done_transport.final_texts() == ["some text and the end"]


async def test_a_429_storm_still_delivers_the_final_text() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    edit_budget = RateBudget(capacity=5, refill_per_s=1, clock=clock)
    streamer = make_streamer(clock, transport, edit_budget=edit_budget)
    text = words(60)

    async def scenario() -> None:
        await streamer.start()
        await clock.sleep(0.5)
        transport.faults.extend(RateLimited(3) for _ in range(12))
        await stream_tokens(clock, streamer, text, size=6, gap_s=0.1)
        await streamer.finish()

    await clock.run(scenario())
    assert transport.final_texts() == [text]
    # After each 429 nothing was tried before its Retry-After had passed.
    attempts = transport.attempt_times[1:]
    for earlier, later in zip(attempts[:12], attempts[1:13]):
        assert later - earlier >= 3 - 1e-9


async def test_transient_errors_on_the_final_are_retried_with_backoff() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def scenario() -> None:
        await streamer.start()
        streamer.append("answer")
        await clock.sleep(2)
        transport.faults.extend(TransientSendError("502") for _ in range(4))
        await streamer.finish(" the whole answer ")

    await clock.run(scenario())
    assert transport.final_texts() == [" the whole answer "]
    finals = transport.attempt_times[-5:]
    assert [b - a for a, b in zip(finals, finals[1:])] == pytest.approx(
        [0.5 + 0.05, 1.0 + 0.05, 2.0 + 0.05, 4.0 + 0.05]
    )


async def test_a_message_that_cannot_be_edited_gets_its_final_in_a_new_message() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def scenario() -> list[str]:
        await streamer.start()
        streamer.append("partial")
        await clock.sleep(2)
        transport.faults.extend(PermanentSendError("message_not_found", code="message_not_found") for _ in range(2))
        return await streamer.finish("partial, then complete")

    assert await clock.run(scenario()) == ["m2"]
    assert transport.texts["m2"] == "partial, then complete"


async def test_a_long_outage_or_429s_never_make_it_give_up_the_final_text() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    pending: list[list[tuple[str, str | None]]] = []

    async def keep(parts: list[tuple[str, str | None]]) -> None:
        pending.append(parts)

    streamer = make_streamer(clock, transport, on_final_pending=keep)

    async def scenario() -> None:
        transport.faults.extend(TransientSendError("down") for _ in range(40))
        transport.faults.extend(RateLimited(5) for _ in range(40))
        await streamer.finish("seen at last")

    await clock.run(scenario(), max_virtual_s=36_000)
    assert transport.final_texts() == ["seen at last"] and len(transport.attempt_times) == 81
    assert pending == [[("seen at last", None)]], "told once, with the text to keep safe meanwhile"
    assert not streamer.final_pending


async def test_only_permanent_failures_give_up_after_max_attempts() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def scenario() -> None:
        transport.faults.extend(PermanentSendError("channel_not_found", code="channel_not_found") for _ in range(100))
        await streamer.finish("never seen")

    await clock.run(scenario())
    assert transport.calls == [] and len(transport.attempt_times) == 8


async def test_a_hung_call_times_out_and_the_final_still_arrives() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def release_later(gate: asyncio.Event) -> None:
        await clock.sleep(45)
        gate.set()

    async def scenario() -> None:
        await streamer.start()
        streamer.append("text")
        await clock.sleep(2)
        gate = transport.gate = asyncio.Event()
        releaser = asyncio.create_task(release_later(gate))
        await streamer.finish("text, final")
        await releaser

    await clock.run(scenario())
    assert transport.final_texts() == ["text, final"]
    assert clock.now() >= 45


async def test_ten_thousand_chars_roll_over_into_messages_within_the_limit() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport, max_chars=1000)
    text = words(1700)[:10_000]

    async def scenario() -> list[str]:
        await streamer.start()
        await stream_tokens(clock, streamer, text, size=25, gap_s=0.02)
        return await streamer.finish()

    ids = await clock.run(scenario())
    assert len(ids) >= 10
    assert all(len(call.text) <= 1000 for call in transport.calls)
    assert "".join(transport.final_texts()) == text
    for message_id in ids[:-1]:
        calls = transport.edits_of(message_id)
        sealed = [i for i, call in enumerate(calls) if not call.text.endswith(CURSOR)]
        # The placeholder at most, then once its final text, never edited again.
        assert sealed[-1] == len(calls) - 1
        assert all(calls[i].text == PLACEHOLDER for i in sealed[:-1])


async def test_a_long_text_appended_at_once_is_split_on_finish() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport, max_chars=1000)
    text = words(1700)[:10_000]

    async def scenario() -> list[str]:
        await streamer.start()
        streamer.append(text)
        return await streamer.finish()

    ids = await clock.run(scenario())
    assert len(ids) >= 10
    assert all(len(call.text) <= 1000 for call in transport.calls)
    assert "".join(transport.final_texts()) == text


async def test_code_fences_stay_balanced_across_messages() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport, max_chars=500)
    text = code_answer()

    async def scenario() -> None:
        await streamer.start()
        await stream_tokens(clock, streamer, text, size=7, gap_s=0.05)
        await streamer.finish()

    await clock.run(scenario())
    finals = transport.final_texts()
    assert len(finals) >= 3
    for call in transport.calls:
        assert len(call.text) <= 500
        assert_fences_balanced(call.text)
    assert finals[1].startswith("```python\n")
    assert finals[-1].endswith("That is all, thanks.")
    # Cuts fall at line ends inside the block, so each repair is a bare "```" + "```python\n".
    assert "".join(finals).replace("``````python\n", "") == text


async def test_tool_status_line_is_shown_then_removed() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)
    status = "🔧 Running calculator…"

    async def scenario() -> None:
        await streamer.start()
        streamer.set_status(status)
        await clock.sleep(2)
        streamer.append("The sum is")
        await clock.sleep(2)
        streamer.set_status(None)
        streamer.append(" 4.")
        await clock.sleep(2)
        await streamer.finish()

    await clock.run(scenario())
    texts = [call.text for call in transport.calls]
    assert PLACEHOLDER + "\n" + status in texts
    assert "The sum is" + CURSOR + "\n" + status in texts
    assert texts[-2] == "The sum is 4." + CURSOR
    assert transport.final_texts() == ["The sum is 4."]


async def test_a_very_long_status_line_is_trimmed() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport, max_chars=200)

    async def scenario() -> None:
        await streamer.start()
        streamer.append("x " * 90)
        streamer.set_status("🔧 " + "very long tool name " * 30)
        await clock.sleep(2)
        await streamer.finish()

    await clock.run(scenario())
    assert all(len(call.text) <= 200 for call in transport.calls)
    assert any("very long tool name" in call.text for call in transport.calls)


async def test_fail_replaces_the_answer_with_the_message() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def scenario() -> None:
        await streamer.start()
        streamer.append("Half an ans")
        await clock.sleep(2)
        await streamer.fail("The model is unavailable. Please try again.")

    await clock.run(scenario())
    assert transport.final_texts() == ["The model is unavailable. Please try again."]


async def test_interrupt_keeps_the_text_and_adds_the_note() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def scenario() -> None:
        await streamer.start()
        streamer.append("Partial ```py\nx = 1")
        await clock.sleep(2)
        await streamer.interrupt("_Interrupted — please ask again._")

    await clock.run(scenario())
    [final] = transport.final_texts()
    assert final == "Partial ```py\nx = 1\n```\n\n_Interrupted — please ask again._"


async def test_interrupt_takes_over_a_finish_that_gave_up() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def scenario() -> None:
        await streamer.start()
        streamer.append("Partial")
        await clock.sleep(2)
        # Permanent failures (only those make a finish give up).
        transport.faults.extend(PermanentSendError("cant_update_message", code="cant_update_message") for _ in range(8))
        await streamer.finish()
        await streamer.interrupt("(interrupted)")

    await clock.run(scenario())
    # The message that could not be edited stays as it was; the note arrives in a new one.
    assert transport.final_texts()[-1] == "Partial\n\n(interrupted)"


async def test_cancelling_the_caller_of_finish_does_not_stop_delivery() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def scenario() -> None:
        await streamer.start()
        streamer.append("Partial")
        await clock.sleep(2)
        gate = transport.gate = asyncio.Event()  # the final edit hangs for a while
        finishing = asyncio.create_task(streamer.finish("and complete"))
        await clock.sleep(5)
        finishing.cancel()
        gate.set()
        await streamer.interrupt("(interrupted)")  # waits for the delivery under way
        assert finishing.cancelled()

    await clock.run(scenario())
    assert transport.final_texts() == ["and complete"]


@pytest.mark.parametrize("ending", ["finish", "fail", "interrupt", "finish-unstarted"])
async def test_no_message_is_left_at_the_placeholder(ending: str) -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def scenario() -> None:
        if ending != "finish-unstarted":
            await streamer.start()
            streamer.set_status("🔧 Searching…")
            await clock.sleep(2)
        if ending.startswith("finish"):
            await streamer.finish()
        elif ending == "fail":
            await streamer.fail("Something went wrong.")
        else:
            await streamer.interrupt("Interrupted.")

    await clock.run(scenario())
    [final] = transport.final_texts()
    assert PLACEHOLDER not in final and CURSOR not in final and "Searching" not in final
    assert final in {"_(no answer)_", "Something went wrong.", "Interrupted."}


async def test_a_corrected_final_text_is_laid_out_again() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport, max_chars=300)
    streamed = words(120)
    corrected = "Short answer."

    async def scenario() -> list[str]:
        await streamer.start()
        await stream_tokens(clock, streamer, streamed, size=20, gap_s=0.1)
        return await streamer.finish(corrected)

    ids = await clock.run(scenario())
    assert len(ids) >= 2
    assert transport.final_texts() == [corrected] + ["…"] * (len(ids) - 1)


async def test_posted_messages_are_reported_and_append_after_the_end_is_refused() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    posted: list[str] = []

    async def record(message_id: str) -> None:
        posted.append(message_id)

    streamer = make_streamer(clock, transport, max_chars=300, on_message_posted=record)

    async def scenario() -> list[str]:
        await streamer.start()
        streamer.append(words(150))
        return await streamer.finish()

    ids = await clock.run(scenario())
    assert posted == ids and len(ids) >= 2
    with pytest.raises(RuntimeError):
        streamer.append("late")


async def test_runs_on_the_real_clock() -> None:
    real = MonotonicClock()

    class InstantTransport:
        def __init__(self) -> None:
            self.texts: dict[str, str] = {}

        async def post(self, text: str, *, key: str | None = None) -> str:
            message_id = str(len(self.texts))
            self.texts[message_id] = text
            return message_id

        async def edit(self, message_id: str, text: str) -> None:
            self.texts[message_id] = text

    transport = InstantTransport()
    streamer = MessageStreamer(
        transport,
        limits=StreamLimits(max_chars=200, min_edit_interval_s=0.01),
        edit_budget=RateBudget(capacity=5, refill_per_s=1000, clock=real),
        post_budget=RateBudget(capacity=5, refill_per_s=1000, clock=real),
    )
    text = words(100)
    await streamer.start()
    for start in range(0, len(text), 50):
        streamer.append(text[start : start + 50])
        await asyncio.sleep(0)
    ids = await streamer.finish()
    assert "".join(transport.texts[i] for i in ids) == text


async def test_an_answer_that_ends_before_its_first_edit_gets_a_token_edits_once() -> None:
    clock = FakeClock()
    edit_budget = RateBudget(capacity=1, refill_per_s=0.1, clock=clock)
    busy_transport, late_transport = MemoryTransport(clock=clock), MemoryTransport(clock=clock)
    busy = make_streamer(clock, busy_transport, edit_budget=edit_budget, key="busy")
    late = make_streamer(clock, late_transport, edit_budget=edit_budget, key="late")

    async def scenario() -> None:
        await busy.start()
        await late.start()
        await clock.sleep(0.5)
        busy.append("busy text")  # takes the only token
        await clock.sleep(0.5)
        late.append("the whole late answer")  # its first edit waits for a token
        await clock.sleep(2)
        await late.finish()
        await busy.finish()

    await clock.run(scenario())
    late_edits = [call for call in late_transport.calls if call.op == "edit"]
    assert [call.text for call in late_edits] == ["the whole late answer"]
    assert busy_transport.final_texts() == ["busy text"]


async def test_an_ended_answer_waiting_for_its_first_edit_goes_before_first_texts() -> None:
    clock = FakeClock()
    edit_budget = RateBudget(capacity=1, refill_per_s=0.1, clock=clock)
    transports = [MemoryTransport(clock=clock) for _ in range(4)]
    streamers = [
        make_streamer(clock, t, edit_budget=edit_budget, key=f"s{i}")
        for i, t in enumerate(transports)
    ]

    async def scenario() -> None:
        for streamer in streamers:
            await streamer.start()
        await clock.sleep(0.5)
        for index, streamer in enumerate(streamers):
            streamer.append(f"text {index}")  # s0 takes the token; s1..s3 wait, in order
            await clock.sleep(0.1)
        ending = asyncio.create_task(streamers[3].finish())
        await ending
        assert streamers[3].message_ids == ["m1"]
        # Only s0's edit went before: s3's final overtook s1's and s2's first texts.
        assert clock.now() < 10 + 1
        await asyncio.gather(*(s.finish() for s in streamers[:3]))

    await clock.run(scenario())
    assert [c.text for c in transports[3].calls if c.op == "edit"] == ["text 3"]
    assert all(t.final_texts() == [f"text {i}"] for i, t in enumerate(transports))


async def test_a_final_over_shown_text_lets_waiting_first_texts_go_first_within_its_deferral() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=1, refill_per_s=1, clock=clock)
    order: list[str] = []

    async def want(name: str, priority: Priority, shows_text: bool = False) -> None:
        await budget.acquire(priority, name, shows_text=shows_text)
        order.append(name)

    async def scenario() -> None:
        await budget.acquire(Priority.FINAL, "warm")
        tasks = [
            asyncio.create_task(want("final-over-shown", Priority.FINAL, shows_text=True)),
            asyncio.create_task(want("first-b", Priority.FIRST)),
            asyncio.create_task(want("first-c", Priority.FIRST)),
            asyncio.create_task(want("edit-d", Priority.INTERMEDIATE)),
        ]
        await asyncio.sleep(0)
        await asyncio.gather(*tasks)

    await clock.run(scenario())
    assert order == ["first-b", "first-c", "final-over-shown", "edit-d"]


async def test_past_its_deferral_a_final_over_shown_text_goes_before_first_texts() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=1, refill_per_s=0.001, clock=clock)
    order: list[str] = []

    async def want(name: str, priority: Priority, shows_text: bool = False) -> None:
        await budget.acquire(priority, name, shows_text=shows_text)
        order.append(name)

    async def scenario() -> None:
        await budget.acquire(Priority.FINAL, "warm")
        shown = asyncio.create_task(want("final-over-shown", Priority.FINAL, shows_text=True))
        await clock.sleep(SHOWN_TEXT_FINAL_DEFER_S + 1)
        first = asyncio.create_task(want("first-late", Priority.FIRST))
        await asyncio.gather(shown, first)

    await clock.run(scenario(), max_virtual_s=10_000)
    assert order == ["final-over-shown", "first-late"]


def test_split_parts_bounds_the_measured_length_of_text_that_grows_when_rendered() -> None:
    def escaped(text: str) -> int:
        return len(text) + 3 * (text.count("<") + text.count(">"))

    text = " ".join("<b>x</b>" for _ in range(300))
    parts = split_parts(text, 500, measure=escaped)
    assert "".join(part.body for part in parts) == text
    assert all(escaped(part.text) <= 500 for part in parts)
    assert all(escaped(part.text) > 250 for part in parts[:-1]), "parts are not needlessly small"


async def test_a_final_kept_while_a_later_part_waits_lists_each_part_once() -> None:
    # The kept parts were laid out again over the slots the final delivery had already added: part 0 came
    # back as part 2, and after a crash the thread showed it twice.
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    pending: list[list[tuple[str, str | None]]] = []

    async def keep(parts: list[tuple[str, str | None]]) -> None:
        pending.append(parts)

    post, posts = transport.post, 0

    async def second_post_fails_once(text: str, *, key: str | None = None) -> str:
        nonlocal posts
        posts += 1
        if posts == 2:
            raise TransientSendError("down for now")
        return await post(text, key=key)

    transport.post = second_post_fails_once  # type: ignore[method-assign]
    streamer = make_streamer(clock, transport, on_final_pending=keep)
    answer = words(200)
    await clock.run(streamer.finish(answer))
    delivered = transport.final_texts()
    assert len(delivered) >= 3 and "".join(delivered).split() == answer.split()
    [kept] = pending
    assert [text for text, _ in kept] == delivered, "each part once, in order"
    assert kept[0][1] == "m1" and all(message_id is None for _, message_id in kept[1:])


async def test_a_final_refused_for_its_whole_workspace_is_tried_once_not_again_and_again() -> None:
    # An uninstalled workspace or a revoked token refuses every call: retrying with a back-off would only log the
    # same refusal max_final_attempts times.
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = make_streamer(clock, transport)

    async def scenario() -> list[str]:
        transport.faults.extend(PermanentSendError("token_revoked", code="token_revoked", team_wide=True) for _ in range(9))
        return await streamer.finish("never seen")

    await clock.run(scenario())
    assert len(transport.attempt_times) == 1 and transport.final_texts() == []


def signed_streamer(clock: FakeClock, transport: MemoryTransport, *, signed: bool) -> MessageStreamer:
    """A streamer whose placeholder comes after 1 s, or after 10 s while another sign shows (`signed`)."""
    limits = StreamLimits(max_chars=400, placeholder_after_s=1.0, signed_placeholder_after_s=10.0)
    return MessageStreamer(transport, limits=limits, edit_budget=RateBudget(capacity=10, refill_per_s=10, clock=clock),
                           post_budget=RateBudget(capacity=10, refill_per_s=10, clock=clock), clock=clock,
                           sign_shown=lambda: signed)


@pytest.mark.parametrize("signed", [False, True])
async def test_while_another_sign_shows_the_answer_is_coming_its_placeholder_waits_longer(signed: bool) -> None:
    # Slack's thread status (or a 👀) already says "working on it": a placeholder would cost a post and turn the first
    # text into an edit, so it waits signed_placeholder_after_s instead of placeholder_after_s.
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = signed_streamer(clock, transport, signed=signed)

    async def scenario() -> None:
        await streamer.start()
        await clock.sleep(5)
        streamer.append("the first words")
        await clock.sleep(1)
        await streamer.finish("the first words, and the rest")

    await clock.run(scenario())
    posts = [call for call in transport.calls if call.op == "post"]
    assert len(posts) == 1
    if signed:
        assert posts[0].at >= 5 and "the first words" in posts[0].text  # no placeholder: the text was the first post
    else:
        assert posts[0].at == pytest.approx(1.0, abs=0.1) and "thinking" in posts[0].text


async def test_past_the_signed_wait_the_placeholder_is_posted_all_the_same() -> None:
    clock = FakeClock()
    transport = MemoryTransport(clock=clock)
    streamer = signed_streamer(clock, transport, signed=True)

    async def scenario() -> None:
        await streamer.start()
        await clock.sleep(12)
        await streamer.finish("late, but whole")

    await clock.run(scenario())
    posts = [call for call in transport.calls if call.op == "post"]
    assert posts and posts[0].at == pytest.approx(10.0, abs=0.1) and "thinking" in posts[0].text
    assert transport.final_texts() == ["late, but whole"]
