"""Per-person daily limits (issue 27): the same reservation as API keys' quotas, a channel's override, exemptions."""

from __future__ import annotations

import asyncio
import io
from datetime import date
from pathlib import Path

import pytest

from adapters.console.chat import ConsoleChat
from core.channels import ChannelSettings, resolve
from core.config import Settings
from core.person_limits import PersonLimits, person_ledger
from core.quota import Grant, QuotaExceeded, TokenQuota
from core.requests import Actor, ConversationKey, Request
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from tests.core.engine.support import RecordingTool, last_done, registry_with, resumed_run
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine
from tests.support.engine import test_settings as make_settings
from tests.support.observe import record_reported_usage

HERE = ConversationKey(platform="slack", workspace="T1", channel="C1", thread="1.1")
SENTENCE = "You have reached your limit of {n} {what} for today; it resets at midnight UTC"


async def test_thirty_concurrent_reservations_for_one_person_never_hold_more_than_their_day(db: Database) -> None:
    # As tests/adapters/api/test_quota.py's key on a fifty-token day, for a person through the same ledger kind.
    settings = make_settings("http://127.0.0.1:9", user_tokens_per_day=50)
    channel = resolve(HERE, channel=None, workspace=None, settings=settings)
    ledger = person_ledger(db)
    alice = Actor(id="U_RESERVE")
    charge = PersonLimits(ledger=ledger).charge(HERE, alice, channel)
    assert charge is not None
    quota = TokenQuota(people=PersonLimits(ledger=ledger)).charging(charge)

    async def reserve() -> Grant | QuotaExceeded:
        try:
            return await quota.reserve(conversation=HERE, user=alice, prompt_tokens=5, max_output=10)
        except QuotaExceeded as refused:
            return refused

    outcomes = await asyncio.gather(*(reserve() for _ in range(30)))
    grants = [outcome for outcome in outcomes if isinstance(outcome, Grant)]
    refusals = [outcome for outcome in outcomes if isinstance(outcome, QuotaExceeded)]
    assert sum(grant.held[0].tokens for grant in grants) == (await ledger.used("slack:T1:U_RESERVE"))[1] == 45
    assert len(grants) == 3 and len(refusals) == 27
    assert all(r.refusal.sentence.startswith(SENTENCE.format(n=50, what="tokens")) for r in refusals)
    for grant in grants:
        await grant.settle(7)
    assert (await ledger.used("slack:T1:U_RESERVE"))[1] == 21
    clamped = await quota.reserve(conversation=HERE, user=alice, prompt_tokens=5, max_output=4096)
    assert clamped.max_output == 24 and (await ledger.used("slack:T1:U_RESERVE"))[1] == 50


async def test_a_day_resets_at_utc_midnight_and_the_refusal_says_when(db: Database) -> None:
    ledger = person_ledger(db)
    settings = make_settings("http://127.0.0.1:9", user_requests_per_day=1)
    charge = PersonLimits(ledger=ledger).charge(HERE, Actor(id="U_DAY"), resolve(HERE, channel=None, workspace=None,
                                                                                  settings=settings))
    assert charge is not None
    assert await ledger.take_request(charge.account, charge.limits, today=date(2026, 3, 1)) is None
    refusal = await ledger.take_request(charge.account, charge.limits, today=date(2026, 3, 1))
    assert refusal is not None and refusal.limit == "requests_per_day"
    assert refusal.sentence == ("You have reached your limit of 1 questions for today; it resets at midnight UTC "
                                "(2026-03-02 00:00 UTC).")
    assert await ledger.take_request(charge.account, charge.limits, today=date(2026, 3, 2)) is None
    assert await ledger.used(charge.account, today=date(2026, 3, 1)) == (1, 0)


def _ask(text: str, user: str, *, channel: str = "C1", thread: str = "", roles: frozenset[str] = frozenset()) -> Request:
    key = ConversationKey(platform="slack", workspace="T1", channel=channel, thread=thread or text)
    return Request(question=text, conversation=key, user=Actor(id=user, roles=roles))


async def test_a_channel_override_beats_the_settings_and_a_refused_question_counts_nothing(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    openai_emulator.script_fn(lambda body: Text("Answered."))
    engine = make_engine(db, openai_emulator.base_url, user_requests_per_day=1)
    await ChannelConfigStore(db).update("slack:T1:C_BIG", set_fields={"user_requests_per_day": 3}, actor="test")
    results = [await engine.answer(_ask(f"big {n}", "U_OVERRIDE", channel="C_BIG")) for n in range(4)]
    assert [r.error for r in results[:3]] == [None, None, None]
    assert results[3].error is not None and results[3].error.startswith(SENTENCE.format(n=3, what="questions"))
    asked = len(openai_emulator.chat_requests)
    # Elsewhere the settings' limit holds: the person's day is one count, so they are over it already.
    elsewhere = await engine.answer(_ask("small", "U_OVERRIDE", channel="C_SMALL"))
    assert elsewhere.error is not None and elsewhere.error.startswith(SENTENCE.format(n=1, what="questions"))
    # Nothing was counted for the refused questions, and the model never saw them.
    assert len(openai_emulator.chat_requests) == asked == 3
    requests, tokens = await person_ledger(db).used("slack:T1:U_OVERRIDE")
    assert requests == 3 and tokens > 0
    # A channel setting is a whole number of at least 0.
    assert ChannelSettings.from_json({"user_tokens_per_day": 10}).user_tokens_per_day == 10


async def test_exempt_people_are_not_limited_and_approvers_only_when_the_setting_says_so(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    openai_emulator.script_fn(lambda body: Text("Answered."))
    strict = make_engine(db, openai_emulator.base_url, user_requests_per_day=0, limits_exempt=("U_EXEMPT",),
                         approvers=("U_APPROVER",), approver_roles=("R_OPS",))
    assert (await strict.answer(_ask("q exempt", "U_EXEMPT"))).error is None
    assert (await strict.answer(_ask("q exempt again", "U_EXEMPT"))).error is None
    assert (await person_ledger(db).used("slack:U_EXEMPT")) == (0, 0)  # not counted at all
    # By default approvers are limited like everyone…
    assert (await strict.answer(_ask("q approver", "U_APPROVER"))).error is not None
    # …and exempt, with admins and approver roles, when LIMITS_EXEMPT_APPROVERS says so.
    lenient = make_engine(db, openai_emulator.base_url, user_requests_per_day=0, approvers=("U_APPROVER",),
                          approver_roles=("R_OPS",), limits_exempt_approvers=True)
    assert (await lenient.answer(_ask("q approver 2", "U_APPROVER"))).error is None
    assert (await lenient.answer(_ask("q role", "U_ROLE", roles=frozenset({"R_OPS"})))).error is None
    assert (await lenient.answer(_ask("q anyone", "U_ANYONE"))).error is not None


async def test_the_terminal_chat_shows_the_same_sentence(db: Database, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script_fn(lambda body: Text("Answered."))
    engine = make_engine(db, openai_emulator.base_url, user_requests_per_day=1)
    feed = iter(["first question", "second question"])

    async def read_line(prompt: str) -> str | None:
        return next(feed, None)

    out = io.StringIO()
    await ConsoleChat(engine, read_line=read_line, out=out).run()
    assert "Answered." in out.getvalue()
    assert SENTENCE.format(n=1, what="questions") in out.getvalue()
    assert len(openai_emulator.chat_requests) == 1


def test_the_limits_are_read_under_the_names_env_example_gives_them(tmp_path: Path) -> None:
    example = (Path(__file__).resolve().parents[2] / ".env.example").read_text(encoding="utf-8")
    names = ("USER_REQUESTS_PER_DAY", "USER_TOKENS_PER_DAY", "LIMITS_EXEMPT", "LIMITS_EXEMPT_APPROVERS")
    assert all(f"\n# {name}=" in example for name in names)
    env = tmp_path / ".env"
    env.write_text("USER_REQUESTS_PER_DAY=20\nUSER_TOKENS_PER_DAY=50000\nLIMITS_EXEMPT=U1, U2\n"
                   "LIMITS_EXEMPT_APPROVERS=true\n", encoding="utf-8")
    settings = Settings(_env_file=env)
    assert (settings.user_requests_per_day, settings.user_tokens_per_day) == (20, 50_000)
    assert settings.limits_exempt == ("U1", "U2") and settings.limits_exempt_approvers is True
    assert Settings(_env_file=None).user_requests_per_day is None  # unset: no limit


async def test_a_resumed_run_reserves_against_its_askers_day_and_takes_no_request(
    db: Database, openai_emulator: OpenAIEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported = record_reported_usage(monkeypatch)
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool), user_requests_per_day=1,
                         user_tokens_per_day=100_000)
    openai_emulator.script(ToolCalls([Call("deploy", '{"env": "prod"}', id="call_dep")]), Text("Deployed."))
    asker = Actor(id="U_RESUME")
    paused = await engine.answer(Request(question="deploy prod", conversation=HERE, user=asker))
    assert paused.continuation_id is not None
    after = [event async for event in resumed_run(engine, paused.continuation_id, {"call_dep": True}, actor=asker)]
    assert tool.runs == [{"env": "prod"}] and last_done(after).answer == "Deployed."
    # One question, though its run went on after the approval; both model calls on the asker's day.
    assert await person_ledger(db).used("slack:T1:U_RESUME") == (1, reported.prompt_tokens + reported.completion_tokens)


async def test_a_persons_questions_in_another_team_never_spend_this_teams_limit(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    # Limits are set per team (its channels, its workspace row); each team's count is its own (issue 25).
    openai_emulator.script_fn(lambda body: Text("Answered."))
    engine = make_engine(db, openai_emulator.base_url, user_requests_per_day=1)
    asked_here = await engine.answer(_ask("here", "U_TWO_TEAMS", channel="C_HERE"))
    elsewhere = await engine.answer(Request(
        question="there", conversation=ConversationKey(platform="slack", workspace="T2", channel="C_THERE", thread="t"),
        user=Actor(id="U_TWO_TEAMS"),
    ))
    assert asked_here.error is None and elsewhere.error is None
    assert await person_ledger(db).used("slack:T1:U_TWO_TEAMS") == (1, await _tokens(db, "T1", "U_TWO_TEAMS"))
    again = await engine.answer(_ask("here again", "U_TWO_TEAMS", channel="C_HERE"))
    assert again.error is not None and again.error.startswith(SENTENCE.format(n=1, what="questions"))


async def _tokens(db: Database, workspace: str, user: str) -> int:
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) FROM token_usage WHERE workspace = %s "
            "AND user_id = %s", (workspace, user))
        row = await cursor.fetchone()
    return int(row[0]) if row else 0
