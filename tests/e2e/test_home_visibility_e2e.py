"""Slack's App Home shows a global approver the calls of pending approvals only from conversations they can read
(public channels, private channels they are in, their own DM); the rest are named by their conversation alone."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from core.tools import ToolRegistry
from tests.emulators.openai_server import Call, OpenAIEmulator, ToolCalls
from tests.emulators.slack import SlackEmulator, app_home_opened_event
from tests.e2e.slack_harness import ALICE, CAROL, SlackBot, deploy_registry, dm, eventually, mention, start_bot

pytestmark = pytest.mark.timeout(60)

PUBLIC = "C0000PUBLIC"
PRIVATE = "C0000SECRET"
ALICE_DM = "D0000ALICE"


@pytest.fixture
async def bot(db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator) -> AsyncIterator[SlackBot]:  # type: ignore[no-untyped-def]
    registry: ToolRegistry = deploy_registry([])
    started = await start_bot(db, slack_emulator, openai_emulator.base_url, registry=registry, approvers=CAROL)
    yield started
    await started.stop()


async def ask_for_deploy(slack: SlackEmulator, bot: SlackBot, openai: OpenAIEmulator, event: dict[str, Any],
                         env: str) -> None:
    # No answer after it: the approval stays open for the Home tab.
    openai.script(ToolCalls([Call("deploy", json.dumps({"env": env}), id=f"call_{env}")], text="Deploying."))
    before = len(openai.chat_requests)
    await slack.deliver_event(bot.url, event)
    channel = event["channel"]
    assert await eventually(lambda: len(openai.chat_requests) > before and any(
        m.blocks and env in json.dumps(m.blocks) for m in slack.messages(channel)))


async def carols_home(slack: SlackEmulator, bot: SlackBot, *, showing: str) -> dict[str, Any]:
    """Carol's Home tab drawn after she opens it: the first drawing since then that shows `showing`."""
    seen = len([v for v in slack.views if v.user_id == CAROL])

    def drawn() -> list[dict[str, Any]]:
        return [v.view for v in slack.views if v.user_id == CAROL][seen:]

    # An approval message shows a moment before its reference is stored: she opens the tab again, as a person
    # would, until the drawing places it (bounded).
    for _ in range(5):
        count = len(drawn())
        await slack.deliver_event(bot.url, app_home_opened_event(user=CAROL, channel="D0000CAROL"))
        assert await eventually(lambda: len(drawn()) > count)
        if await eventually(lambda: any(showing in json.dumps(view) for view in drawn()), limit_s=1.0):
            break
    return next(view for view in drawn() if showing in json.dumps(view))


def buttons_of(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [el for block in view["blocks"] if block["type"] == "actions" for el in block["elements"]]


async def test_a_global_approver_sees_calls_only_from_conversations_they_can_read_and_the_rest_named(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    for user in (ALICE, CAROL):
        slack.add_user(user)
    slack.set_private_members(PRIVATE, [ALICE])
    slack.set_dm_user(ALICE_DM, ALICE)
    await ask_for_deploy(slack, bot, openai_emulator, mention(slack, PUBLIC, "deploy", user=ALICE), "public-env")
    await ask_for_deploy(slack, bot, openai_emulator, mention(slack, PRIVATE, "deploy", user=ALICE), "secret-env")
    await ask_for_deploy(slack, bot, openai_emulator, dm(slack, ALICE_DM, "deploy please", user=ALICE), "dm-env")

    view = await carols_home(slack, bot, showing=f"<#{ALICE_DM}>")
    drawn = json.dumps(view)
    # The public channel's call is shown and decidable; the private channel's and the DM's are not shown.
    assert "public-env" in drawn
    assert "secret-env" not in drawn and "dm-env" not in drawn
    assert len([b for b in buttons_of(view) if b["action_id"] == "relaybot_home_approve"]) == 1
    assert set(json.loads(view["private_metadata"])) == {
        ref for ref in json.loads(view["private_metadata"]) if json.loads(view["private_metadata"])[ref]["c"] == PUBLIC
    }
    # …but named, so Carol knows something waits there.
    assert f"<#{PRIVATE}>" in drawn and f"<#{ALICE_DM}>" in drawn

    # Once Carol is in the private channel, its call is hers to read and decide there too.
    slack.set_private_members(PRIVATE, [ALICE, CAROL])
    view = await carols_home(slack, bot, showing="secret-env")
    drawn = json.dumps(view)
    assert "public-env" in drawn and "secret-env" in drawn and "dm-env" not in drawn
    assert len([b for b in buttons_of(view) if b["action_id"] == "relaybot_home_approve"]) == 2


async def test_the_asker_sees_the_call_of_their_own_dm(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    slack.add_user(ALICE)
    slack.set_dm_user(ALICE_DM, ALICE)
    await ask_for_deploy(slack, bot, openai_emulator, dm(slack, ALICE_DM, "deploy please", user=ALICE), "own-dm-env")
    # The approval message is in the DM a moment before its reference is stored; until then the Home tab cannot
    # place the call. Alice opens the tab again, as a person would, until it shows it (bounded).
    seen = len([v for v in slack.views if v.user_id == ALICE])

    def shows_own_call() -> bool:
        views = [v.view for v in slack.views if v.user_id == ALICE][seen:]
        return any("own-dm-env" in json.dumps(view) and buttons_of(view) for view in views)

    for _ in range(5):
        drawn = len([v for v in slack.views if v.user_id == ALICE])
        await slack.deliver_event(bot.url, app_home_opened_event(user=ALICE, channel=ALICE_DM))
        assert await eventually(lambda: len([v for v in slack.views if v.user_id == ALICE]) > drawn)
        if await eventually(shows_own_call, limit_s=1.0):
            break
    assert shows_own_call(), [v.view for v in slack.views if v.user_id == ALICE][seen:]
