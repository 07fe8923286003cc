"""Slack approval buttons end to end: policy, edits, ephemerals, exactly-once resume, restarts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import SlackAdapter
from bot.jobs import expire_approvals
from core.store.db import Database
from core.tools import ToolRegistry
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.emulators.slack import SlackEmulator
from tests.support.click_path import MAX_CLICK_PATH_MODULES, ClickPath
from tests.e2e.slack_harness import ALICE, BOB, CAROL, SlackBot, bot_replies, deploy_registry, eventually, mention, start_bot

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000OPS01"


@pytest.fixture
def deploys() -> list[str]:
    return []


@pytest.fixture
def registry(deploys: list[str]) -> ToolRegistry:
    return deploy_registry(deploys)


@pytest.fixture
async def bot(db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, registry) -> AsyncIterator[SlackBot]:  # type: ignore[no-untyped-def]
    started = await start_bot(db, slack_emulator, openai_emulator.base_url, registry=registry, approvers=CAROL)
    yield started
    await started.stop()


async def ask_for_deploy(slack: SlackEmulator, bot: SlackBot, *envs: str) -> tuple[str, Any]:
    event = mention(slack, CHANNEL, "deploy please", user=ALICE)
    await slack.deliver_event(bot.url, event)
    assert await eventually(lambda: any(is_approval(m) for m in bot_replies(slack, CHANNEL, event["ts"])))
    [approval] = [m for m in bot_replies(slack, CHANNEL, event["ts"]) if is_approval(m)]
    return event["ts"], approval


def is_approval(message: Any) -> bool:
    """Blocks that are not an answer's own (its text as a markdown block, beside Stop or 👍/👎)."""
    return bool(message.blocks) and not any(b.get("type") in ("markdown", "context_actions") for b in message.blocks)


def buttons(message: Any) -> list[dict[str, Any]]:
    return [el for block in message.blocks or [] if block["type"] == "actions" for el in block["elements"]]


def click(slack: SlackEmulator, message: Any, action_id: str, user: str, index: int = 0) -> dict[str, Any]:
    current = slack.message(CHANNEL, message.ts)
    matching = [b for b in buttons(current) if b["action_id"] == action_id]
    return slack.block_actions(CHANNEL, message.ts, user=user, action_id=action_id, value=matching[index]["value"])


def script_deploy(openai: OpenAIEmulator, *envs: str, answer: str = "Deployed.") -> None:
    calls = [Call("deploy", json.dumps({"env": env}), id=f"call_{env}") for env in envs]
    openai.script(ToolCalls(calls, text="Let me deploy."), Text(answer))


async def test_approve_runs_the_tool_and_resumes_in_a_new_message(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, deploys: list[str]
) -> None:
    slack = slack_emulator
    script_deploy(openai_emulator, "prod", answer="Deployed to prod.")
    thread, approval = await ask_for_deploy(slack, bot)
    assert f"<@{ALICE}>" in approval.blocks[0]["text"]["text"] and "deploy" in json.dumps(approval.blocks)
    assert [b["action_id"] for b in buttons(approval)] == ["relaybot_approve", "relaybot_reject"]
    assert (await slack.deliver_interaction(bot.url, click(slack, approval, "relaybot_approve", ALICE))).status == 200
    assert await eventually(lambda: any(m.text == "Deployed to prod." for m in bot_replies(slack, CHANNEL, thread)))
    assert deploys == ["prod"]
    edited = slack.message(CHANNEL, approval.ts)
    assert buttons(edited) == [] and f"✅ Approved by <@{ALICE}>" in json.dumps(edited.blocks, ensure_ascii=False)
    texts = [m.text for m in bot_replies(slack, CHANNEL, thread)]
    assert texts.index("Deployed to prod.") > texts.index("Let me deploy.")


async def test_reject_and_unauthorised_click(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, deploys: list[str]
) -> None:
    slack = slack_emulator
    script_deploy(openai_emulator, "prod", answer="Okay, I did not deploy.")
    thread, approval = await ask_for_deploy(slack, bot)
    approve_value = buttons(approval)[0]["value"]
    await slack.deliver_interaction(bot.url, click(slack, approval, "relaybot_approve", BOB))
    assert await eventually(lambda: len(slack.ephemerals) == 1)
    assert slack.ephemerals[0].user == BOB and slack.ephemerals[0].text.startswith("Only")
    assert f"<@{ALICE}>" in slack.ephemerals[0].text
    assert buttons(slack.message(CHANNEL, approval.ts)), "an unauthorised click changes nothing"

    await slack.deliver_interaction(bot.url, click(slack, approval, "relaybot_reject", CAROL))
    assert await eventually(lambda: any(m.text == "Okay, I did not deploy." for m in bot_replies(slack, CHANNEL, thread)))
    assert deploys == []
    edited = json.dumps(slack.message(CHANNEL, approval.ts).blocks, ensure_ascii=False)
    assert f"❌ Rejected by <@{CAROL}>" in edited

    # A stale client still showing the buttons clicks again.
    await slack.deliver_interaction(bot.url, slack.block_actions(
        CHANNEL, approval.ts, user=ALICE, action_id="relaybot_approve", value=approve_value))
    assert await eventually(lambda: len(slack.ephemerals) == 2)
    assert "already" in slack.ephemerals[1].text


async def test_two_pending_calls_decided_separately_and_20_concurrent_clicks(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, deploys: list[str]
) -> None:
    slack = slack_emulator
    script_deploy(openai_emulator, "staging", "prod", answer="Staging deployed, prod skipped.")
    thread, approval = await ask_for_deploy(slack, bot)
    ids = [b["action_id"] for b in buttons(approval)]
    assert ids == ["relaybot_approve", "relaybot_reject"] * 2 + ["relaybot_approve_all", "relaybot_reject_all"]

    await slack.deliver_interaction(bot.url, click(slack, approval, "relaybot_reject", ALICE, index=1))
    assert await eventually(lambda: len(buttons(slack.message(CHANNEL, approval.ts))) == 2)
    assert deploys == []

    approve_staging = click(slack, approval, "relaybot_approve", ALICE, index=0)
    deliveries = await asyncio.gather(*(slack.deliver_interaction(bot.url, approve_staging) for _ in range(20)))
    assert all(d.status == 200 for d in deliveries)
    assert await eventually(lambda: any(m.text == "Staging deployed, prod skipped." for m in bot_replies(slack, CHANNEL, thread)))
    await asyncio.sleep(0.3)
    assert deploys == ["staging"]
    finals = [m for m in bot_replies(slack, CHANNEL, thread) if m.text == "Staging deployed, prod skipped."]
    assert len(finals) == 1
    edited = json.dumps(slack.message(CHANNEL, approval.ts).blocks, ensure_ascii=False)
    assert "✅ Approved by" in edited and "❌ Rejected by" in edited and buttons(slack.message(CHANNEL, approval.ts)) == []


async def test_approve_after_restarting_the_app(
    db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, registry, deploys: list[str]  # type: ignore[no-untyped-def]
) -> None:
    slack = slack_emulator
    first = await start_bot(db, slack, openai_emulator.base_url, registry=registry)
    script_deploy(openai_emulator, "prod", answer="Deployed after the restart.")
    thread, approval = await ask_for_deploy(slack, first)
    await first.stop()

    second = await start_bot(db, slack, openai_emulator.base_url, registry=registry)
    try:
        await slack.deliver_interaction(second.url, click(slack, approval, "relaybot_approve", ALICE))
        assert await eventually(lambda: any(m.text == "Deployed after the restart." for m in bot_replies(slack, CHANNEL, thread)))
        assert deploys == ["prod"] and buttons(slack.message(CHANNEL, approval.ts)) == []
    finally:
        await second.stop()


async def test_expiry_edits_the_approval_message(
    db: Database, bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    script_deploy(openai_emulator, "prod")
    _thread, approval = await ask_for_deploy(slack, bot)
    async with db.connection() as conn:
        await conn.execute("UPDATE continuations SET expires_at = now() - interval '1 second'")
    assert await expire_approvals(bot.engine.approvals, {"slack": bot.adapter.notifier}) == 1
    edited = slack.message(CHANNEL, approval.ts)
    assert "⌛" in json.dumps(edited.blocks, ensure_ascii=False) and buttons(edited) == []


async def test_a_failed_edit_of_the_approval_message_still_resumes_the_run(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, deploys: list[str]
) -> None:
    slack = slack_emulator
    script_deploy(openai_emulator, "prod", answer="Deployed despite the edit.")
    thread, approval = await ask_for_deploy(slack, bot)
    # The approval message cannot be edited (e.g. deleted by an admin): the decision stands anyway.
    slack.fail_next("chat.update", error="cant_update_message")
    await slack.deliver_interaction(bot.url, click(slack, approval, "relaybot_approve", ALICE))
    assert await eventually(lambda: any(m.text == "Deployed despite the edit." for m in bot_replies(slack, CHANNEL, thread)))
    assert deploys == ["prod"]
    assert not any("couldn't record" in e.text for e in slack.ephemerals), "the click was recorded"


SLACK_MESSAGE_WRITES = frozenset({"chat.postMessage", "chat.update", "chat.startStream", "chat.appendStream"})


async def test_a_click_reaches_the_resumed_runs_first_answer_write_through_no_more_modules_than_measured(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, deploys: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slack = slack_emulator
    # From the click's HTTP request to the resumed run's first write of its answer, a post or an edit (the
    # approval's own redraw is no run's: it comes first, outside one).
    path = ClickPath(SlackAdapter._handle_http)
    api_call = AsyncWebClient.api_call

    async def noting_writes(client: AsyncWebClient, api_method: str, **arguments: Any) -> Any:
        if api_method in SLACK_MESSAGE_WRITES:
            path.written()
        return await api_call(client, api_method, **arguments)

    monkeypatch.setattr(AsyncWebClient, "api_call", noting_writes)
    script_deploy(openai_emulator, "prod", answer="Deployed along a measured path.")
    thread, approval = await ask_for_deploy(slack, bot)
    path.arm()
    try:
        await slack.deliver_interaction(bot.url, click(slack, approval, "relaybot_approve", ALICE))
        assert await eventually(
            lambda: any(m.text == "Deployed along a measured path." for m in bot_replies(slack, CHANNEL, thread))
        )
    finally:
        path.disarm()
    assert deploys == ["prod"]
    assert path.path is not None, "the resumed run wrote no message"
    assert path.path[0] == "adapters/slack/adapter.py" and "adapters/slack/clicks.py" in path.path
    assert "core/approvals.py" in path.path and "adapters/answers.py" in path.path
    assert len(path.path) <= MAX_CLICK_PATH_MODULES["slack"], path.report()


EXTERNAL_TEAM = "T0000EXTRN"


async def test_an_external_clicker_cannot_decide_and_refusals_offer_no_admin(
    db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, registry, deploys: list[str]  # type: ignore[no-untyped-def]
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, registry=registry, approvers=CAROL,
                          slack_team_ids=slack.team_id)
    try:
        script_deploy(openai_emulator, "prod", answer="Deployed by the right person.")
        thread, approval = await ask_for_deploy(slack, bot)
        # Slack has no admin rule: the sentence names who may decide, and no admin.
        await slack.deliver_interaction(bot.url, click(slack, approval, "relaybot_approve", BOB))
        assert await eventually(lambda: len(slack.ephemerals) == 1)
        assert "admin" not in slack.ephemerals[0].text and f"<@{CAROL}>" in slack.ephemerals[0].text
        # A person of another organisation in a shared channel, even one listed as an approver.
        value = buttons(approval)[0]["value"]
        outsider = slack.block_actions(CHANNEL, approval.ts, user=CAROL, action_id="relaybot_approve", value=value,
                                       user_team=EXTERNAL_TEAM)
        assert (await slack.deliver_interaction(bot.url, outsider)).status == 200
        assert await eventually(lambda: len(slack.ephemerals) == 2)
        assert slack.ephemerals[1].user == CAROL and "workspace where relaybot is enabled" in slack.ephemerals[1].text
        assert buttons(slack.message(CHANNEL, approval.ts)) and deploys == []
        await slack.deliver_interaction(bot.url, click(slack, approval, "relaybot_approve", ALICE))
        assert await eventually(lambda: any(m.text == "Deployed by the right person." for m in bot_replies(slack, CHANNEL, thread)))
        assert deploys == ["prod"]
    finally:
        await bot.stop()


def approval_messages(slack: SlackEmulator, thread: str) -> list[Any]:
    return [m for m in bot_replies(slack, CHANNEL, thread) if is_approval(m)]


async def ask_for_many(slack: SlackEmulator, bot: SlackBot, count: int) -> tuple[str, list[Any]]:
    event = mention(slack, CHANNEL, "deploy everywhere", user=ALICE)
    await slack.deliver_event(bot.url, event)
    expected = -(-count // 20)
    assert await eventually(lambda: len(approval_messages(slack, event["ts"])) == expected)
    return event["ts"], approval_messages(slack, event["ts"])


async def test_approve_all_covers_only_the_calls_its_message_showed(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, deploys: list[str]
) -> None:
    slack = slack_emulator
    envs = [f"env{n:02d}" for n in range(25)]
    script_deploy(openai_emulator, *envs, answer="All 25 deployed.")
    thread, (first, second) = await ask_for_many(slack, bot, 25)
    shown_first = json.dumps(first.blocks)
    assert "env19" in shown_first and "env20" not in shown_first and "5 more calls in the next message" in shown_first
    assert "env20" in json.dumps(second.blocks) and "env24" in json.dumps(second.blocks)

    await slack.deliver_interaction(bot.url, click(slack, first, "relaybot_approve_all", ALICE))
    assert await eventually(lambda: json.dumps(slack.message(CHANNEL, first.ts).blocks, ensure_ascii=False).count("✅ Approved") == 20)
    await asyncio.sleep(0.3)
    assert deploys == [], "the calls of the second message were not shown there, so they wait"
    assert len([b for b in buttons(slack.message(CHANNEL, second.ts)) if b["action_id"] == "relaybot_approve"]) == 5

    await slack.deliver_interaction(bot.url, click(slack, second, "relaybot_reject_all", ALICE))
    assert await eventually(lambda: any(m.text == "All 25 deployed." for m in bot_replies(slack, CHANNEL, thread)), limit_s=30)
    assert sorted(deploys) == envs[:20]
    edited = json.dumps(slack.message(CHANNEL, second.ts).blocks, ensure_ascii=False)
    assert edited.count("❌ Rejected") == 5 and buttons(slack.message(CHANNEL, second.ts)) == []


async def test_cut_arguments_are_one_click_away_in_the_thread(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    notes = "\n".join(f"step {n}: restart <service-{n}> @channel" for n in range(300))
    calls = [Call("deploy", json.dumps({"notes": notes, "env": "PRODUCTION"}), id="call_long")]
    openai_emulator.script(ToolCalls(calls, text="Let me deploy."), Text("Done."))
    thread, approval = await ask_for_deploy(slack, bot)
    [section] = [b for b in approval.blocks if b.get("block_id") == "relaybot_call_0"]
    assert '"env": "PRODUCTION"' in section["text"]["text"] and "✂️" in section["text"]["text"]
    value = section["accessory"]["value"]
    press = slack.block_actions(CHANNEL, approval.ts, user=BOB, action_id="relaybot_arguments", value=value)
    await slack.deliver_interaction(bot.url, press)
    assert await eventually(lambda: any("Full arguments" in m.text for m in bot_replies(slack, CHANNEL, thread)))
    await asyncio.sleep(0.5)
    parts = [m for m in bot_replies(slack, CHANNEL, thread) if "Full arguments" in m.text]
    assert len(parts) > 1 and all(len(m.text) <= 4000 and m.thread_ts == thread for m in parts)
    shown = "".join(m.text.split("```")[1] for m in parts)
    assert "step 299: restart &lt;service-299&gt;" in shown and "@channel" not in shown and "PRODUCTION" in shown
    # A second press does not repeat them; the clicker is told where they are.
    await slack.deliver_interaction(bot.url, press)
    assert await eventually(lambda: any("already in this thread" in e.text for e in slack.ephemerals))
    assert len([m for m in bot_replies(slack, CHANNEL, thread) if "Full arguments" in m.text]) == len(parts)


async def test_expiry_edits_every_message_of_a_long_approval(
    db: Database, bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    script_deploy(openai_emulator, *[f"env{n:02d}" for n in range(45)])
    _thread, messages = await ask_for_many(slack, bot, 45)
    continuation = buttons(messages[0])[0]["value"].split("|")[0]
    async with db.connection() as conn:
        await conn.execute("UPDATE continuations SET expires_at = now() - interval '1 second' WHERE id = %s", (continuation,))
    assert await expire_approvals(bot.engine.approvals, {"slack": bot.adapter.notifier}) == 1
    for message in messages:
        edited = slack.message(CHANNEL, message.ts)
        assert "⌛" in json.dumps(edited.blocks, ensure_ascii=False) and buttons(edited) == []
