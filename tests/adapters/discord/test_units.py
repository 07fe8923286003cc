"""Discord adapter pieces without a gateway: custom ids, views, texts, sources, budgets, doctor."""

from __future__ import annotations

import uuid

from adapters import wording as shared_wording
from adapters.discord import check_discord
from adapters.discord.approvals import CUSTOM_ID_MAX_CHARS, ButtonTarget, approval_view
from adapters.discord.rendering import MAX_CONTENT_CHARS, approval_text, interrupted_text
from adapters.discord.sources import EMBED_DESCRIPTION_MAX_CHARS, sources_embed
from adapters.discord.transport import ChannelBudgets
from adapters.streaming import Priority
from core.config import Settings
from core.events import PendingCall, SourceItem
from tests.emulators.discord import DiscordEmulator


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
    continuation = str(uuid.uuid4())
    single = approval_view(continuation, 1)
    assert [item.item.label for item in single.children] == ["Approve", "Reject"]  # type: ignore[attr-defined]
    several = approval_view(continuation, 3, decided=[1])
    labels = [(item.item.label, item.item.disabled) for item in several.children]  # type: ignore[attr-defined]
    assert labels[2:4] == [("Approve 2", True), ("Reject 2", True)]
    assert labels[-2:] == [("Approve all", False), ("Reject all", False)]
    closed = approval_view(continuation, 12, closed=True)  # too many for per-call rows
    assert [item.item.disabled for item in closed.children] == [True, True]  # type: ignore[attr-defined]


def test_approval_text_stays_within_the_content_limit() -> None:
    calls = tuple(
        PendingCall(call_id=f"c{i}", tool="deploy", arguments={"blob": "x" * 5000, "fence": "```"}) for i in range(3)
    )
    text = approval_text(calls=calls, requested_by="42", expires_at=1_700_000_000)
    assert len(text) <= MAX_CONTENT_CHARS
    assert "<@42>" in text and text.count("```json") == 3


def test_interrupted_text_keeps_what_was_shown_and_closes_fences() -> None:
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
    assert ok.startswith("Discord: OK") and "relaybot" in ok
    assert bad.startswith("Discord: FAILED") and "401" in bad
    assert "not configured" in missing
    assert all("\n" not in line for line in (ok, bad, missing))
