"""The one door to Slack: one failure rule for every call, a deadline lane that never waits behind deliveries, no
retry handler that re-sends a post, and the runtime guard that names a module calling the client around it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.slack.budgets import ScaledClock, SlackBudgets
from adapters.slack.failures import SlackPermanentError, translate_error
from adapters.slack.transport import SlackWeb
from adapters.streaming import RateLimited, TransientSendError
from adapters.streaming.transport import is_permanent
from tests.emulators.slack import SlackEmulator
from tests.support import platform_door

ROOT = Path(__file__).resolve().parents[3]


def slack_error(error: str, status: int = 200, headers: dict[str, str] | None = None) -> SlackApiError:
    response = AsyncSlackResponse(
        client=AsyncWebClient(), http_verb="POST", api_url="https://slack.test/api/chat.postMessage", req_args={},
        data={"ok": False, "error": error}, headers=headers or {}, status_code=status,
    )
    return SlackApiError(f"The request to the Slack API failed: {error}", response)


@pytest.mark.parametrize("code", ["channel_not_found", "not_in_channel", "is_archived", "msg_too_long"])
def test_only_errors_slack_documents_as_final_are_permanent(code: str) -> None:
    error = translate_error(slack_error(code), time_scale=1.0)
    assert isinstance(error, SlackPermanentError) and isinstance(error, SlackApiError)
    assert is_permanent(error) and error.code == code and not error.team_wide


def test_a_revoked_token_is_permanent_for_the_whole_team() -> None:
    for code in ("invalid_auth", "token_revoked"):
        error = translate_error(slack_error(code), time_scale=1.0)
        assert is_permanent(error) and isinstance(error, SlackPermanentError) and error.team_wide


def test_everything_else_is_later_never_permanent() -> None:
    limited = translate_error(slack_error("ratelimited", 429, {"Retry-After": "7"}), time_scale=0.5)
    assert isinstance(limited, RateLimited) and limited.retry_after_s == 14
    for error in (slack_error("internal_error"), slack_error("an_error_nobody_documented"),
                  slack_error("fatal_error", 500), ConnectionResetError("reset")):
        translated = translate_error(error, time_scale=1.0)
        assert isinstance(translated, TransientSendError) and not is_permanent(translated), error
    assert not is_permanent(RuntimeError("an exception of our own"))


async def test_a_call_with_a_deadline_never_waits_behind_paused_deliveries(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    clock = ScaledClock(slack.time_scale)
    budgets = SlackBudgets(clock=clock, share=1.0)
    web = SlackWeb(AsyncWebClient(token=slack.bot_token, base_url=slack.api_url), budgets=budgets, clock=clock)
    # Every delivery budget of the team is paused for ten (Slack) minutes by 429s.
    budgets.edit(slack.team_id).penalize(600)
    budgets.post(slack.team_id, "C0000DEADL").penalize(600)
    budgets.workspace_posts(slack.team_id).penalize(600)
    told = await asyncio.wait_for(
        web.now(slack.team_id, "chat.postEphemeral", channel="C0000DEADL", user="U0000ALICE", text="noted"), 2.0
    )
    assert told["ok"] and [e.text for e in slack.ephemerals] == ["noted"]
    # Its own 429 pauses only its lane, and says so at once instead of waiting.
    slack.fail_next("chat.postEphemeral", retry_after_s=30)
    with pytest.raises(RateLimited):
        await web.now(slack.team_id, "chat.postEphemeral", channel="C0000DEADL", user="U0000ALICE", text="again")
    with pytest.raises(RateLimited):
        await asyncio.wait_for(
            web.now(slack.team_id, "chat.postEphemeral", channel="C0000DEADL", user="U0000ALICE", text="again"), 1.0
        )
    slack.add_user("U0000ALICE")
    opened = await asyncio.wait_for(web.now(slack.team_id, "views.publish", user_id="U0000ALICE",
                                            view={"type": "home", "blocks": []}), 2.0)
    assert opened["ok"], "another method's lane is not paused"


async def test_a_post_whose_reply_was_lost_is_not_sent_again_by_the_client(slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    clock = ScaledClock(slack.time_scale)
    budgets = SlackBudgets(clock=clock, share=1.0)
    from adapters.slack.adapter import RateLimitCounter

    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url, retry_handlers=[RateLimitCounter()])
    web = SlackWeb(client, budgets=budgets, clock=clock)
    thread = slack.add_user_message("C0000LOST1", "a question", "U0000ALICE", None)
    slack.lose_reply_next("chat.postMessage")
    with pytest.raises(TransientSendError):
        await web.once(slack.team_id, "chat.postMessage", channel="C0000LOST1", thread_ts=thread, text="once")
    assert [m.text for m in slack.thread("C0000LOST1", thread)][1:] == ["once"], "the client did not send it again"


async def test_the_runtime_guard_names_a_module_that_calls_the_client_outside_the_transport(
    slack_emulator: SlackEmulator,
) -> None:
    slack = slack_emulator
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    # Code that says it lives in adapters/slack/surface.py, calling the raw client as that module once did.
    namespace: dict[str, Any] = {}
    source = "async def call(client):\n    return await client.chat_postMessage(channel='C0000GUARD', text='raw')\n"
    exec(compile(source, str(ROOT / "adapters" / "slack" / "surface.py"), "exec"), namespace)
    await namespace["call"](client)
    [violation] = platform_door.take()
    assert (violation.platform, violation.request, violation.module) == ("slack", "chat.postMessage",
                                                                         "adapters/slack/surface.py")
    # Through the door: no violation.
    clock = ScaledClock(slack.time_scale)
    web = SlackWeb(client, budgets=SlackBudgets(clock=clock, share=1.0), clock=clock)
    exec(compile("async def call(web):\n    return await web.once('T0', 'chat.postMessage', channel='C0000GUARD', text='ok')\n",
                 str(ROOT / "adapters" / "slack" / "surface.py"), "exec"), namespace)
    await namespace["call"](web)
    assert platform_door.take() == []


def test_the_runtime_guard_reads_discord_requests_by_the_same_rule() -> None:
    import discord.http
    import discord.webhook.async_ as webhook

    # The three doors are wrapped (conftest installs the guard for the whole suite).
    for wrapped in (AsyncWebClient.api_call, discord.http.HTTPClient.request, webhook.AsyncWebhookAdapter.request):
        assert wrapped.__module__ == platform_door.__name__, wrapped
    namespace: dict[str, Any] = {}
    source = "import sys\ndef call(check):\n    return check('discord', 'POST /channels/{channel_id}/messages', sys._getframe())\n"
    for module, flagged in (("adapters/discord/surface.py", True), ("adapters/discord/transport_calls.py", False),
                            ("tests/adapters/discord/helper.py", False)):
        exec(compile(source, str(ROOT / module), "exec"), namespace)
        found = namespace["call"](platform_door.check)
        assert (found is not None) == flagged, module
    [violation] = platform_door.take()
    assert violation.module == "adapters/discord/surface.py"
