"""Discord adapter pieces without a gateway: custom ids, views, texts, sources, budgets, doctor."""

from __future__ import annotations

import asyncio
import json
import uuid
from types import SimpleNamespace

import discord
import pytest

from adapters import wording as shared_wording
from adapters.answers import repaired_text
from adapters.discord import check_discord
from adapters.discord.buttons import CUSTOM_ID_MAX_CHARS, Pressed, approval_view, part_of_message
from adapters.discord.render import (
    CALLS_PER_MESSAGE,
    EMBED_DESCRIPTION_MAX_CHARS,
    MAX_CONTENT_CHARS,
    ApprovalPart,
    approval_parts,
    approval_text,
    full_arguments_file,
    sources_embed,
)
from adapters.discord.inbound import MEMBERSHIP_CACHE_S, DiscordAccess
from adapters.discord.transport import DiscordBudgets, guarded, send_after_answers, send_reliably
from adapters.streaming import Priority, RateBudget, RateLimited, TransientSendError
from core.approvals import ApprovalView, CallView, DecisionView, ViewState
from core.citations import Citation
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
        Pressed(continuation_id=continuation, approve=True, call_index=7),
        Pressed(continuation_id=continuation, approve=False, call_index=None),
    ):
        assert len(target.custom_id) <= CUSTOM_ID_MAX_CHARS
        assert Pressed.parse(target.custom_id) == target
    assert Pressed.parse(f"rb:x:{continuation}:1") is None
    assert Pressed.parse("rb:a:not-a-uuid:1") is None


def _buttons(view: discord.ui.View) -> list[tuple[str, bool, str]]:
    return [(item.item.label, item.item.disabled, item.item.custom_id) for item in view.children]  # type: ignore[attr-defined]


async def test_views_disable_decided_calls_and_add_all_buttons_for_several() -> None:
    one = approval(1)
    assert [label for label, _, _ in _buttons(approval_view(one, approval_parts(one.calls)[0]))] == ["Approve", "Reject"]
    three = approval(3, decided=(1,))
    labels = [(label, disabled) for label, disabled, _ in _buttons(approval_view(three, approval_parts(three.calls)[0]))]
    assert labels[2:4] == [("Approve 2", True), ("Reject 2", True)]
    assert labels[-2:] == [("Approve all", False), ("Reject all", False)]
    closed = approval(12, state="expired")
    first, second = approval_parts(closed.calls)
    drawn = _buttons(approval_view(closed, first))
    assert len(drawn) == 2 * first.count + 2 and all(disabled for _, disabled, _ in drawn)
    assert [label for label, _, _ in drawn[-2:]] == [f"Approve all (these {first.count})", "Reject all 12"]
    assert first.count + second.count == 12


def test_approval_text_stays_within_the_content_limit() -> None:
    view = approval(3, arguments={"blob": "x" * 5000, "fence": "```"})
    parts = approval_parts(view.calls)
    texts = [approval_text(view, part) for part in parts]
    assert all(len(text) <= MAX_CONTENT_CHARS for text in texts)
    assert "<@42>" in texts[0] and sum(text.count("```json") for text in texts) == 3
    assert all(shared_wording.arguments_cut() in text for text in texts)


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


def test_many_calls_are_shown_in_parts_each_deciding_only_its_own_calls() -> None:
    calls = tuple(
        CallView(call_id=f"c{i}", tool="deploy", arguments={"env": "e" * 60}, description="d" * 200) for i in range(30)
    )
    view = ApprovalView(
        continuation_id=str(uuid.uuid4()), requested_by="42", calls=calls, expires_at=1_700_000_000,
        decisions={f"c{i}": DecisionView(approved=True, actor="alice" * 20) for i in range(10)},
    )
    parts = approval_parts(view.calls)
    # Every call in exactly one part, in order, at most eight a message (its buttons).
    assert [index for part in parts for index in part.indexes] == list(range(30))
    assert len(parts) > 1 and all(0 < part.count <= CALLS_PER_MESSAGE for part in parts)
    footer = shared_wording.approval_footer("<t:1700000000:R>")
    for number, part in enumerate(parts):
        text = approval_text(view, part)
        assert len(text) <= MAX_CONTENT_CHARS and text.endswith(footer)
        assert text.count("```json") == part.count
        assert all(f"**{index + 1}. `deploy`**" in text for index in part.indexes)
        assert (shared_wording.more_calls_below(30 - part.count, len(parts) - 1) in text) == (number == 0)
        ids = [custom_id for _, _, custom_id in _buttons(approval_view(view, part))]
        approve_all = Pressed.parse(next(i for i in ids if i.startswith("rb:a:") and "*" in i))
        assert approve_all is not None and approve_all.part == part
        assert f"rb:r:{view.continuation_id}:*" in ids  # Reject all covers every undecided call
        assert part_of_message(view.continuation_id, ids) == part
    shown = "".join(approval_text(view, part) for part in parts)
    assert shown.count("✅ Approved by ") == 10 and "10. ✅ Approved by " in shown


def test_a_long_argument_never_hides_the_keys_after_it_and_the_full_arguments_keep_the_models_order() -> None:
    arguments = {"script": "echo hello; " * 300, "notes": ["n" * 100] * 50, "target": "PRODUCTION"}
    calls = (CallView(call_id="a", tool="run", arguments=arguments), CallView(call_id="b", tool="run", arguments={"x": 1}))
    view = ApprovalView(continuation_id=str(uuid.uuid4()), requested_by="42", calls=calls, expires_at=1_700_000_000)
    [part] = approval_parts(view.calls)
    text = approval_text(view, part)
    assert '"target": "PRODUCTION"' in text
    assert text.index('"script"') < text.index('"notes"') < text.index('"target"')
    assert text.count(shared_wording.arguments_cut()) == 1  # said under the call that was cut
    labels = [label for label, _, _ in _buttons(approval_view(view, part))]
    assert labels[-1] == shared_wording.full_arguments_label()
    full = json.loads(full_arguments_file(view))
    assert [call["tool"] for call in full] == ["run", "run"]
    assert full[0]["arguments"] == arguments and list(full[0]["arguments"]) == ["script", "notes", "target"]
    short = approval(2)
    assert shared_wording.full_arguments_label() not in [
        label for label, _, _ in _buttons(approval_view(short, approval_parts(short.calls)[0]))
    ]


def test_custom_ids_of_parts_round_trip() -> None:
    continuation = str(uuid.uuid4())
    target = Pressed(continuation_id=continuation, approve=True, call_index=None, part=ApprovalPart(first=8, count=8))
    assert len(target.custom_id) <= CUSTOM_ID_MAX_CHARS and Pressed.parse(target.custom_id) == target
    legacy = Pressed.parse(f"rb:a:{continuation}:*")  # drawn before approvals had parts
    assert legacy is not None and legacy.call_index is None and legacy.part is None
    assert part_of_message(continuation, [f"rb:a:{continuation}:3", f"rb:r:{continuation}:4"]) == ApprovalPart(
        first=3, count=2
    )
    assert part_of_message(continuation, [f"rb:r:{continuation}:*"]) is None


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
    embed = sources_embed([Citation(number=n, item=item) for n, item in enumerate(items, start=1)])
    assert embed is not None and embed.description is not None
    assert len(embed.description) <= EMBED_DESCRIPTION_MAX_CHARS
    assert embed.description.startswith("`[1]` [Doc (0) ") and "](https://docs.example/0)" in embed.description
    assert "more" in embed.description.splitlines()[-1]
    local = sources_embed([Citation(number=3, item=SourceItem(title="notes", uri="file:///srv/notes.md", text=""))])
    assert local is not None and local.description == "`[3]` notes"
    cited = sources_embed([Citation(number=n, item=items[n - 1]) for n in (2, 4)])
    assert cited is not None and [line[:5] for line in (cited.description or "").splitlines()] == ["`[2]`", "`[4]`"]


async def test_channel_budget_never_exceeds_its_window() -> None:
    clock = FakeClock()
    budgets = DiscordBudgets(calls_per_window=4, window_s=5.0, clock=clock)
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


async def test_channel_budgets_drop_the_idle_ones_but_never_one_still_in_use() -> None:
    clock = FakeClock()
    budgets = DiscordBudgets(calls_per_window=4, window_s=5.0, clock=clock)
    full_after_s = 2 / (2 / 5.0)  # burst 2 at 2 calls per 5 s
    for channel in range(1_000):
        await budgets(channel).acquire(Priority.FINAL)
    held = budgets(5_000)
    used = budgets(5_001)
    await used.acquire(Priority.FINAL)
    assert len(budgets) == 1_002
    clock.t += full_after_s / 2
    await used.acquire(Priority.FINAL)  # drawn on recently: kept
    clock.t += full_after_s * 0.75
    budgets(7)  # any call tidies up
    assert len(budgets) == 2  # channel 7 (new) and 5_001; the thousand idle ones are gone
    assert budgets(5_001) is used
    clock.t += full_after_s * 10
    budgets(8)
    assert len(budgets) == 1
    # Idle for long, but an answer still holds it: the same budget is handed out again, not a second one.
    assert budgets(5_000) is held


async def test_a_budget_drawn_on_by_a_waiter_is_not_dropped_while_it_waits() -> None:
    clock = VirtualClock()
    budgets = DiscordBudgets(calls_per_window=4, window_s=5.0, clock=clock)

    async def scenario() -> None:
        budget = budgets(1)
        waits = [asyncio.ensure_future(budget.acquire(Priority.INTERMEDIATE, i)) for i in range(12)]
        del budget
        await asyncio.sleep(0)
        await clock.sleep(12.0)  # a queue longer than a refill: tokens keep being handed out
        assert budgets(1) is budgets(1) and len(budgets) == 1
        await asyncio.gather(*waits)

    await clock.run(scenario())


async def test_direct_message_rule_asks_discord_once_per_user_and_caches_either_answer() -> None:
    now = [0.0]
    lookups: list[tuple[int, int]] = []
    members = {(10, 1)}
    failing = {3}

    async def is_member(guild_id: int, user_id: int) -> bool:
        lookups.append((guild_id, user_id))
        if user_id in failing:
            raise discord.HTTPException(SimpleNamespace(status=500, reason="boom", headers={}), "boom")  # type: ignore[arg-type]
        return (guild_id, user_id) in members

    rule = DiscordAccess(direct_messages="members", allowed_guilds=("10", "20"), is_member=is_member, clock=lambda: now[0])
    assert await rule.verdict(1) == "allowed" and lookups == [(10, 1)]
    assert await rule.verdict(2) == "not_member" and lookups[1:] == [(10, 2), (20, 2)]
    assert await rule.verdict(1) == "allowed" and await rule.verdict(2) == "not_member"
    assert len(lookups) == 3  # both answers cached
    assert await rule.verdict(3) == "unknown" and await rule.verdict(3) == "unknown"
    assert len(lookups) == 7  # a failed lookup is not cached
    assert await rule.refusal(2) == shared_wording.direct_messages_members_only()
    assert await rule.refusal(3) == shared_wording.membership_unknown()
    now[0] += MEMBERSHIP_CACHE_S + 1
    members.add((20, 2))  # joined an allowed guild; noticed once the cached answer runs out
    assert await rule.verdict(2) == "allowed"

    async def never(guild_id: int, user_id: int) -> bool:
        raise AssertionError("no lookup without an allowlist or under open/closed")

    assert await DiscordAccess(direct_messages="members", allowed_guilds=(), is_member=never).verdict(5) == "allowed"
    assert await DiscordAccess(direct_messages="open", allowed_guilds=("10",), is_member=never).verdict(5) == "allowed"
    closed = DiscordAccess(direct_messages="closed", allowed_guilds=(), is_member=never)
    assert await closed.verdict(5) == "closed" and await closed.refusal(5) == shared_wording.direct_messages_off()
