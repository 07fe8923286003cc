"""Discord adapter pieces without a gateway: custom ids, views, texts, sources, budgets, doctor."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import discord
import pytest

from adapters import wording as shared_wording
from adapters.answers import repaired_text
from adapters.discord import check_discord
from adapters.discord.buttons import CUSTOM_ID_MAX_CHARS, ButtonTarget, approval_view
from adapters.discord.render import (
    EMBED_DESCRIPTION_MAX_CHARS,
    MAX_CONTENT_CHARS,
    approval_text,
    sources_embed,
)
from adapters.discord.transport import ChannelBudgets, guarded, send_after_answers, send_reliably
from adapters.streaming import Priority, RateBudget, RateLimited, TransientSendError
from core.approvals import ApprovalView, CallView, DecisionView, ViewState
from core.config import Settings
from core.events import SourceItem
from tests.adapters.streaming_fakes import FakeClock as VirtualClock
from tests.emulators.discord import DiscordEmulator


def approval(
    calls: int, *, decided: tuple[int, ...] = (), state: ViewState = "open", arguments: dict | None = None
) -> ApprovalView:
    """An approval of `calls` deploy calls, those at the `decided` indexes approved by alice."""
    views = tuple(
        CallView(call_id=f"c{i}", tool="deploy", arguments=arguments or {"env": f"env{i}"}) for i in range(calls)
    )
    return ApprovalView(
        continuation_id=str(uuid.uuid4()),
        requested_by="42",
        calls=views,
        expires_at=1_700_000_000,
        decisions={f"c{i}": DecisionView(approved=True, actor="alice") for i in decided},
        state=state,
    )


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)


def test_custom_ids_round_trip_within_100_chars() -> None:
    continuation = str(uuid.uuid4())
    for target in (
        ButtonTarget(continuation_id=continuation, approve=True, call_index=7),
        ButtonTarget(continuation_id=continuation, approve=False, call_index=None),
    ):
        assert len(target.custom_id) <= CUSTOM_ID_MAX_CHARS
        assert ButtonTarget.parse(target.custom_id) == target
    assert ButtonTarget.parse(f"rb:x:{continuation}:1") is None
    assert ButtonTarget.parse("rb:a:not-a-uuid:1") is None


async def test_views_disable_decided_calls_and_add_all_buttons_for_several() -> None:
    single = approval_view(approval(1))
    assert [item.item.label for item in single.children] == ["Approve", "Reject"]  # type: ignore[attr-defined]
    several = approval_view(approval(3, decided=(1,)))
    labels = [(item.item.label, item.item.disabled) for item in several.children]  # type: ignore[attr-defined]
    assert labels[2:4] == [("Approve 2", True), ("Reject 2", True)]
    assert labels[-2:] == [("Approve all", False), ("Reject all", False)]
    closed = approval_view(approval(12, state="expired"))  # too many for per-call rows
    assert [item.item.disabled for item in closed.children] == [True, True]  # type: ignore[attr-defined]


def test_approval_text_stays_within_the_content_limit() -> None:
    text = approval_text(approval(3, arguments={"blob": "x" * 5000, "fence": "```"}))
    assert len(text) <= MAX_CONTENT_CHARS
    assert "<@42>" in text and text.count("```json") == 3


def test_approval_text_shows_arguments_in_the_models_order_decisions_and_expiry() -> None:
    calls = (
        CallView(call_id="a", tool="deploy", arguments={"zone": "eu", "app": "web"}, description="Deploy the service"),
        CallView(call_id="b", tool="deploy", arguments={"zone": "us"}),
    )
    view = ApprovalView(
        continuation_id=str(uuid.uuid4()), requested_by="42", calls=calls, expires_at=1_700_000_000.9,
        decisions={"a": DecisionView(approved=True, actor="alice")},
    )
    text = approval_text(view)
    assert text.startswith(shared_wording.approval_heading("<@42>", 2))
    assert "**1. `deploy`** — Deploy the service" in text
    assert text.index('"zone"') < text.index('"app"')  # as the model wrote them, not sorted
    assert "1. ✅ Approved by alice" in text and "2. " not in text.split("```")[-1]
    assert text.endswith(shared_wording.approval_footer("<t:1700000000:R>"))
    expired = approval_text(view.expired())
    assert expired.endswith(shared_wording.approval_expired()) and "Expires" not in expired
    assert "1. ✅ Approved by alice" in expired
    rejected = ApprovalView(
        continuation_id=view.continuation_id, requested_by="42", calls=calls[1:], expires_at=0,
        decisions={"b": DecisionView(approved=False, actor="bob")}, state="closed",
    )
    assert approval_text(rejected).endswith(shared_wording.rejected_by("bob"))  # one call: no number


def test_many_calls_keep_the_decisions_and_count_the_calls_left_out() -> None:
    calls = tuple(
        CallView(call_id=f"c{i}", tool="deploy", arguments={"env": "e" * 60}, description="d" * 200) for i in range(30)
    )
    view = ApprovalView(
        continuation_id=str(uuid.uuid4()), requested_by="42", calls=calls, expires_at=1_700_000_000,
        decisions={f"c{i}": DecisionView(approved=True, actor="alice") for i in range(10)},
    )
    text = approval_text(view)
    assert len(text) <= MAX_CONTENT_CHARS
    assert "10. ✅ Approved by alice" in text and text.endswith(shared_wording.approval_footer("<t:1700000000:R>"))
    shown = text.count("```json")
    assert 0 < shown < 30 and shared_wording.more_calls_hidden(30 - shown) in text


def test_interrupted_text_keeps_what_was_shown_and_closes_fences() -> None:
    def interrupted_text(shown: str) -> str:
        return repaired_text(shown, shared_wording.interrupted(), max_chars=MAX_CONTENT_CHARS)

    assert interrupted_text("_thinking…_") == shared_wording.interrupted()  # the placeholder is dropped
    text = interrupted_text("```py\nprint(1) ▌")
    assert text.startswith("```py\nprint(1)\n```") and "▌" not in text
    assert len(interrupted_text("y" * 2500)) <= MAX_CONTENT_CHARS


def test_sources_embed_numbers_links_and_fits() -> None:
    assert sources_embed(()) is None
    items = [SourceItem(title=f"Doc [{i}] " + "t" * 200, uri=f"https://docs.example/{i}", text="") for i in range(60)]
    items.append(SourceItem(title="local file", uri="/srv/notes.md", text=""))
    embed = sources_embed(items)
    assert embed is not None and embed.description is not None
    assert len(embed.description) <= EMBED_DESCRIPTION_MAX_CHARS
    assert embed.description.startswith("`[1]` [Doc (0) ") and "](https://docs.example/0)" in embed.description
    assert "more" in embed.description.splitlines()[-1]
    local = sources_embed([SourceItem(title="notes", uri="/srv/notes.md", text="")])
    assert local is not None and local.description == "`[1]` notes"


async def test_channel_budget_never_exceeds_its_window() -> None:
    clock = FakeClock()
    budgets = ChannelBudgets(calls_per_window=4, window_s=5.0, clock=clock)
    budget = budgets(1)
    assert budgets(1) is budget and budgets(2) is not budget
    times = []
    for _ in range(20):
        await budget.acquire(Priority.INTERMEDIATE)
        times.append(clock.now())
    for start in times:
        assert sum(1 for t in times if start <= t < start + 5.0) <= 4
    assert budgets.bound_s(10) == (10 - 2) / (2 / 5.0)


async def test_doctor_checks_the_token(discord_emulator: DiscordEmulator) -> None:
    base = discord_emulator.api_base
    ok = await check_discord(Settings(_env_file=None, discord_token=discord_emulator.token, discord_api_base=base))
    bad = await check_discord(Settings(_env_file=None, discord_token="wrong", discord_api_base=base))
    missing = await check_discord(Settings(_env_file=None, discord_token=None))
    assert ok.startswith("ok — ") and "relaybot" in ok
    assert bad.startswith("FAILED — ") and "401" in bad
    assert "not configured" in missing
    assert all("\n" not in line for line in (ok, bad, missing))


def _http_error(status: int, headers: dict[str, str] | None = None) -> discord.HTTPException:
    response = SimpleNamespace(status=status, reason="test", headers=headers or {})
    return discord.HTTPException(response, {"message": "test", "code": 0})  # type: ignore[arg-type]


async def _raising(error: BaseException) -> None:
    raise error


async def test_guarded_reads_failures_by_the_shared_rule() -> None:
    with pytest.raises(RateLimited) as limited:
        await guarded(_raising(_http_error(429, {"Retry-After": "2.5"})))
    assert limited.value.retry_after_s == 2.5
    with pytest.raises(RateLimited) as own:
        await guarded(_raising(discord.RateLimited(3.0)))
    assert own.value.retry_after_s == 3.0
    with pytest.raises(TransientSendError):
        await guarded(_raising(_http_error(503)))
    with pytest.raises(TransientSendError):
        await guarded(_raising(ConnectionResetError()))
    with pytest.raises(discord.HTTPException):  # permanent: passed through as is
        await guarded(_raising(_http_error(404)))


async def test_a_note_to_a_clicker_waits_behind_the_channels_answers() -> None:
    clock = VirtualClock()
    budget = RateBudget(capacity=1, refill_per_s=1.0, clock=clock)
    order: list[str] = []

    async def call(name: str) -> str:
        order.append(name)
        return name

    async def scenario() -> None:
        await budget.acquire(Priority.FINAL)  # the channel is busy: nothing left in the bucket
        note = asyncio.ensure_future(send_after_answers(budget, lambda: call("note"), clock=clock))
        await asyncio.sleep(0)
        answer = asyncio.ensure_future(send_reliably(budget, lambda: call("answer"), clock=clock))
        await asyncio.gather(note, answer)

    await clock.run(scenario())
    assert order == ["answer", "note"]
