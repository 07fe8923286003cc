"""The Slack emulator against the real slack_sdk client, slack_bolt AsyncApp and Socket Mode handler."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from tests.emulators.slack import (
    MethodLimit,
    SlackEmulator,
    app_mention_event,
    channel_message_event,
    event_envelope,
    workspace_post_cap,
)

CHANNEL = "C0000CHAN1"
POLL_LIMIT_S = 5.0


def client_for(slack: SlackEmulator, **kwargs: object) -> AsyncWebClient:
    return AsyncWebClient(token=slack.bot_token, base_url=slack.api_url, **kwargs)  # type: ignore[arg-type]


async def eventually(predicate: Callable[[], bool]) -> bool:
    """Polls a condition a bounded number of times (work in other tasks must finish first)."""
    deadline = time.monotonic() + POLL_LIMIT_S
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


def bolt_app(slack: SlackEmulator) -> AsyncApp:
    app = AsyncApp(client=client_for(slack), signing_secret=slack.signing_secret)

    @app.event("app_mention")
    async def on_mention(event: dict, say: Callable) -> None:  # type: ignore[type-arg]
        await say(text=f"echo: {event['text']}", thread_ts=event.get("thread_ts") or event["ts"])

    @app.action("approve")
    async def on_approve(ack: Callable, body: dict, respond: Callable) -> None:  # type: ignore[type-arg]
        await ack()
        await respond(replace_original=True, text=f"approved by {body['user']['id']}")

    return app


@pytest.fixture
async def bolt_url(slack_emulator: SlackEmulator) -> AsyncIterator[str]:  # noqa: F811
    runner = web.AppRunner(bolt_app(slack_emulator).web_app(path="/slack/events"))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"
    await runner.cleanup()


async def test_web_client_posts_updates_and_reads_thread(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    slack = slack_emulator
    client = client_for(slack)
    auth = await client.auth_test()
    assert (auth["team_id"], auth["user_id"], auth["bot_id"]) == (slack.team_id, slack.bot_user_id, slack.bot_id)

    root = slack.add_user_message(CHANNEL, "hello bot", "U0000ALICE")
    posted = await client.chat_postMessage(channel=CHANNEL, text="thinking…", thread_ts=root)
    await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="Hello")
    await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="Hello Alice")

    replies = await client.conversations_replies(channel=CHANNEL, ts=root)
    assert [m["text"] for m in replies["messages"]] == ["hello bot", "Hello Alice"]
    assert replies["messages"][0]["reply_count"] == 1
    record = slack.message(CHANNEL, posted["ts"])
    assert [e.text for e in record.edits] == ["Hello", "Hello Alice"]
    assert record.is_bot and record.thread_ts == root
    assert [m.ts for m in slack.thread(CHANNEL, posted["ts"])] == [root, posted["ts"]]

    user = await client.users_info(user="U0000ALICE")
    assert user["user"]["name"] == "u0000alice"
    await client.chat_postEphemeral(channel=CHANNEL, user="U0000ALICE", text="only you")
    await client.assistant_threads_setStatus(channel_id=CHANNEL, thread_ts=root, status="is thinking…")
    assert [(e.user, e.text) for e in slack.ephemerals] == [("U0000ALICE", "only you")]
    assert slack.statuses[0].status == "is thinking…"
    await client.chat_delete(channel=CHANNEL, ts=posted["ts"])
    assert [m.ts for m in slack.messages(CHANNEL)] == [root]
    assert "chat.update" in slack.call_names()


async def test_wrong_token_and_unknown_thread_are_rejected(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    bad = AsyncWebClient(token="xoxb-not-a-real-token", base_url=slack_emulator.api_url)
    with pytest.raises(SlackApiError) as raised:
        await bad.chat_postMessage(channel=CHANNEL, text="hi")
    assert raised.value.response["error"] == "invalid_auth"
    with pytest.raises(SlackApiError) as raised:
        await client_for(slack_emulator).chat_postMessage(channel=CHANNEL, text="hi", thread_ts="1.000001")
    assert raised.value.response["error"] == "thread_not_found"
    with pytest.raises(SlackApiError) as raised:
        await client_for(slack_emulator).chat_postMessage(channel="not-a-channel", text="hi")
    assert raised.value.response["error"] == "channel_not_found"


async def test_chat_update_over_the_workspace_limit_gets_429_with_retry_after() -> None:
    # Half speed: 50 a minute means ~1.7 a second, far slower than 20 calls in a row.
    async with SlackEmulator(time_scale=0.5) as slack:
        client = client_for(slack)
        posted = await client.chat_postMessage(channel=CHANNEL, text="x")
        errors: list[SlackApiError] = []
        for n in range(20):
            try:
                await client.chat_update(channel=CHANNEL, ts=posted["ts"], text=f"edit {n}")
            except SlackApiError as exc:
                errors.append(exc)
        assert errors, "the bucket (burst 10) must run dry"
        response = errors[0].response
        assert response.status_code == 429 and response["error"] == "ratelimited"
        assert int(response.headers["Retry-After"]) >= 1
        assert slack.count_429["chat.update"] == len(errors)
        # Other workspaces have their own budget.
        other = slack.add_team("T0000OTHER")
        other_client = AsyncWebClient(token=other.bot_token, base_url=slack.api_url)
        own = await other_client.chat_postMessage(channel="C0000OTHER", text="y")
        await other_client.chat_update(channel="C0000OTHER", ts=own["ts"], text="z")


async def test_injected_faults_and_sdk_retry_handler(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    slack = slack_emulator
    slack.fail_next("chat.postMessage", error="internal_error", http_status=500)
    with pytest.raises(SlackApiError) as raised:
        await client_for(slack).chat_postMessage(channel=CHANNEL, text="x")
    assert raised.value.response.status_code == 500
    slack.fail_next("chat.postMessage", times=1)
    retrying = client_for(slack, retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=2)])
    posted = await retrying.chat_postMessage(channel=CHANNEL, text="after a 429")
    assert slack.message(CHANNEL, posted["ts"]).text == "after a 429"
    assert slack.count_429 == {"chat.postMessage": 1}


async def test_size_limits_match_slack() -> None:
    async with SlackEmulator(limits=False) as slack:
        await check_size_limits(client_for(slack))


async def check_size_limits(client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel=CHANNEL, text="a" * 5000)  # posts may be long
    with pytest.raises(SlackApiError) as raised:
        await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="b" * 4001)
    assert raised.value.response["error"] == "msg_too_long"
    await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="b" * 4000)

    section = {"type": "section", "text": {"type": "mrkdwn", "text": "s" * 3001}}
    with pytest.raises(SlackApiError) as raised:
        await client.chat_postMessage(channel=CHANNEL, text="t", blocks=[section])
    assert raised.value.response["error"] == "invalid_blocks"
    fitting = [{"type": "section", "text": {"type": "mrkdwn", "text": "s" * 3000}} for _ in range(5)]
    with pytest.raises(SlackApiError) as raised:
        await client.chat_postMessage(channel=CHANNEL, text="t", blocks=fitting)
    assert raised.value.response["error"] == "msg_blocks_too_long"
    header = {"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}
    with pytest.raises(SlackApiError) as raised:
        await client.chat_postMessage(channel=CHANNEL, text="t", blocks=[header])
    assert raised.value.response["error"] == "invalid_blocks"
    with pytest.raises(SlackApiError) as raised:
        await client.chat_postMessage(channel=CHANNEL, text="x" * 40_001)
    assert raised.value.response["error"] == "msg_too_long"


async def test_file_download_needs_the_bot_token(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    slack = slack_emulator
    info = slack.add_file("notes.txt", b"hello file", "text/plain")
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {slack.bot_token}"}
        async with session.get(info["url_private_download"], headers=headers) as resp:
            assert (resp.status, await resp.read()) == (200, b"hello file")
        async with session.get(info["url_private_download"]) as resp:
            assert resp.content_type == "text/html"  # Slack's sign-in page, not the file


async def test_bolt_http_app_answers_a_signed_mention(
    slack_emulator: SlackEmulator, bolt_url: str  # noqa: F811
) -> None:
    slack = slack_emulator
    text = f"<@{slack.bot_user_id}> ping"
    ts = slack.add_user_message(CHANNEL, text, "U0000ALICE")
    event = app_mention_event(text=text, user="U0000ALICE", channel=CHANNEL, ts=ts, team_id=slack.team_id)
    status, _latency = await slack.deliver_event(bolt_url, event)
    assert status == 200
    assert await eventually(lambda: len(slack.thread(CHANNEL, ts)) == 2)
    reply = slack.thread(CHANNEL, ts)[1]
    assert reply.text == f"echo: {text}" and reply.user == slack.bot_user_id


async def test_bolt_http_app_refuses_bad_signature_and_stale_timestamp(
    slack_emulator: SlackEmulator, bolt_url: str  # noqa: F811
) -> None:
    slack = slack_emulator
    ts = slack.add_user_message(CHANNEL, "hi", "U0000ALICE")
    event = app_mention_event(text="hi", user="U0000ALICE", channel=CHANNEL, ts=ts, team_id=slack.team_id)
    assert (await slack.deliver_event(bolt_url, event, sign=False)).status == 401
    stale = int(time.time()) - 600
    assert (await slack.deliver_event(bolt_url, event, timestamp=stale)).status == 401
    challenge = await slack.deliver_url_verification(bolt_url, challenge="abc")
    assert challenge.status == 200 and "abc" in challenge.body
    assert slack.thread(CHANNEL, ts)[1:] == []


async def test_bolt_http_app_handles_a_button_click(
    slack_emulator: SlackEmulator, bolt_url: str  # noqa: F811
) -> None:
    slack = slack_emulator
    posted = await client_for(slack).chat_postMessage(channel=CHANNEL, text="Run the tool?")
    payload = slack.block_actions(CHANNEL, posted["ts"], user="U0000BOB", action_id="approve", value="c1")
    assert (await slack.deliver_interaction(bolt_url, payload)).status == 200
    assert await eventually(lambda: slack.message(CHANNEL, posted["ts"]).text == "approved by U0000BOB")
    assert slack.response_url_posts[0]["replace_original"] is True


async def test_socket_mode_handler_connects_and_acks_a_pushed_event(
    slack_emulator: SlackEmulator,  # noqa: F811
) -> None:
    slack = slack_emulator
    handler = AsyncSocketModeHandler(bolt_app(slack), app_token=slack.app_token)
    await handler.connect_async()
    try:
        assert await slack.wait_socket_connected(timeout_s=5.0)
        text = f"<@{slack.bot_user_id}> over socket"
        ts = slack.add_user_message(CHANNEL, text, "U0000ALICE")
        event = app_mention_event(text=text, user="U0000ALICE", channel=CHANNEL, ts=ts, team_id=slack.team_id)
        ack = await slack.push_socket_event(slack.event_envelope(event), timeout_s=5.0)
        assert ack is not None and slack.socket_acks == [ack]
        assert await eventually(lambda: len(slack.thread(CHANNEL, ts)) == 2)
        assert slack.thread(CHANNEL, ts)[1].text == f"echo: {text}"
        assert "apps.connections.open" in slack.call_names()
    finally:
        await handler.close_async()


async def test_app_token_is_only_for_socket_mode(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    slack = slack_emulator
    app_client = AsyncWebClient(token=slack.app_token, base_url=slack.api_url)
    with pytest.raises(SlackApiError) as raised:
        await app_client.chat_postMessage(channel=CHANNEL, text="x")
    assert raised.value.response["error"] == "not_allowed_token_type"
    with pytest.raises(SlackApiError) as raised:
        await client_for(slack).apps_connections_open(app_token=slack.bot_token)
    assert raised.value.response["error"] == "not_allowed_token_type"


async def test_post_message_limit_is_per_channel() -> None:
    limits = {"chat.postMessage": MethodLimit(calls=1, window_s=60.0, burst=2, scope="channel")}
    async with SlackEmulator(limits=limits) as slack:
        client = client_for(slack)
        for _ in range(2):
            await client.chat_postMessage(channel=CHANNEL, text="x")
        with pytest.raises(SlackApiError):
            await client.chat_postMessage(channel=CHANNEL, text="x")
        await client.chat_postMessage(channel="C0000CHAN2", text="other channel has its own bucket")


async def test_workspace_wide_post_cap_spans_channels_and_answers_429_with_retry_after() -> None:
    # 60 posts a minute with a burst of 5, across all channels; per-channel limits alone allow far more.
    async with SlackEmulator(time_scale=0.5, workspace_post_cap=workspace_post_cap(60, burst=5)) as slack:
        client = client_for(slack)
        for n in range(5):
            await client.chat_postMessage(channel=f"C0000CAP{n:02d}", text="within the burst")
        with pytest.raises(SlackApiError) as raised:
            await client.chat_postMessage(channel="C0000CAP99", text="over the workspace cap")
        response = raised.value.response
        assert response.status_code == 429 and response["error"] == "ratelimited"
        # Whole Slack seconds, at least one, in real seconds: at time scale 0.5, a multiple of 0.5 s.
        retry_after = float(response.headers["Retry-After"])
        assert retry_after >= 0.5 and (retry_after / 0.5).is_integer()
        assert slack.messages("C0000CAP99") == [] and slack.count_429 == {"chat.postMessage": 1}
        # Other methods and other workspaces are not capped by it.
        await client.chat_update(channel="C0000CAP00", ts=slack.messages("C0000CAP00")[0].ts, text="edit")
        other = slack.add_team("T0000OTHER")
        await AsyncWebClient(token=other.bot_token, base_url=slack.api_url).chat_postMessage(channel="C0000OTH01", text="y")
        # After the Retry-After it gave, the call goes through.
        await asyncio.sleep(retry_after)
        await client.chat_postMessage(channel="C0000CAP99", text="later")
        slack.cap_workspace_posts(None)
        for n in range(10):
            await client.chat_postMessage(channel=f"C0000FREE{n}", text="uncapped")


async def test_a_call_refused_by_the_workspace_cap_costs_its_channel_nothing() -> None:
    limits = {"chat.postMessage": MethodLimit(calls=1, window_s=600.0, burst=1, scope="channel")}
    async with SlackEmulator(limits=limits, workspace_post_cap=workspace_post_cap(1, burst=1)) as slack:
        client = client_for(slack)
        await client.chat_postMessage(channel="C0000AAAA1", text="takes the workspace's only token")
        with pytest.raises(SlackApiError):
            await client.chat_postMessage(channel="C0000BBBB1", text="refused by the cap")
        slack.cap_workspace_posts(None)
        # Had the refused call spent C0000BBBB1's token, this would be a 429.
        await client.chat_postMessage(channel="C0000BBBB1", text="its channel still has its token")


async def test_the_workspace_cap_applies_with_other_limits_off() -> None:
    async with SlackEmulator(limits=False, workspace_post_cap=2) as slack:
        client = client_for(slack)
        assert slack.limits["chat.postMessage/workspace"].burst == 1
        await client.chat_postMessage(channel=CHANNEL, text="1")
        with pytest.raises(SlackApiError):
            await client.chat_postMessage(channel="C0000CHAN2", text="2")
        for _ in range(5):
            await client.chat_update(channel=CHANNEL, ts=slack.messages(CHANNEL)[0].ts, text="edits are not limited")


async def test_a_seeded_share_of_calls_is_answered_429() -> None:
    async def run(seed: int) -> list[int | None]:
        async with SlackEmulator(limits=False) as slack:
            slack.rate_limit_randomly(0.3, retry_after_s=(1, 3), seed=seed)
            client = client_for(slack)
            outcomes: list[int | None] = []
            for n in range(60):
                try:
                    await client.chat_postMessage(channel=CHANNEL, text=str(n)) if n % 2 else await client.auth_test()
                    outcomes.append(None)
                except SlackApiError as exc:
                    assert exc.response.status_code == 429 and exc.response["error"] == "ratelimited"
                    outcomes.append(int(exc.response.headers["Retry-After"]))
            assert slack.random_429_count == sum(o is not None for o in outcomes)
            return outcomes

    first = await run(7)
    assert first == await run(7), "the same seed, the same faults"
    limited = [o for o in first if o is not None]
    assert 5 <= len(limited) <= 35 and set(limited) <= {1, 2, 3}
    assert any(o is not None for o in first[0::2]) and any(o is not None for o in first[1::2]), "every method"

    async with SlackEmulator(limits=False) as slack:
        slack.rate_limit_randomly(1.0, methods=["chat.update"])
        client = client_for(slack)
        posted = await client.chat_postMessage(channel=CHANNEL, text="posts pass")
        with pytest.raises(SlackApiError):
            await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="edits do not")
        slack.rate_limit_randomly(0)
        await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="off again")


def test_slack_connect_events_name_the_authors_own_team() -> None:
    event = app_mention_event(text="hi", user="WEXT", channel=CHANNEL, ts="1.000001", team_id="THOST",
                              user_team="TEXTERNAL")
    assert (event["team"], event["user_team"], event["source_team"], event["user_profile"]["team"]) == (
        "TEXTERNAL", "TEXTERNAL", "TEXTERNAL", "TEXTERNAL")
    assert event_envelope(event, team_id="THOST", api_app_id="A1", bot_user_id="UB")["is_ext_shared_channel"] is True
    local = app_mention_event(text="hi", user="U1", channel=CHANNEL, ts="1.000002", team_id="THOST")
    assert "user_team" not in local and local["team"] == "THOST"
    assert event_envelope(local, team_id="THOST", api_app_id="A1", bot_user_id="UB")["is_ext_shared_channel"] is False
    broadcast = channel_message_event(text="also to channel", user="U1", channel=CHANNEL, ts="1.000004",
                                      team_id="THOST", thread_ts="1.000002", subtype="thread_broadcast")
    assert broadcast["subtype"] == "thread_broadcast" and broadcast["thread_ts"] == "1.000002"


async def test_clicks_name_the_clickers_own_team(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    slack = slack_emulator
    posted = await client_for(slack).chat_postMessage(channel=CHANNEL, text="Run the tool?")
    payload = slack.block_actions(CHANNEL, posted["ts"], user="WEXT", action_id="approve", value="c1",
                                  user_team="TEXTERNAL")
    assert payload["user"]["team_id"] == "TEXTERNAL" and payload["team"]["id"] == slack.team_id


async def test_other_apps_messages_and_message_metadata_read_back(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    slack = slack_emulator
    root = slack.add_user_message(CHANNEL, "build status?", "U0000ALICE")
    slack.add_bot_message(CHANNEL, "build is red", bot_id="B0000CIBOT", username="ci", thread_ts=root)
    client = client_for(slack)
    posted = await client.chat_postMessage(
        channel=CHANNEL, thread_ts=root, text="part 1",
        metadata={"event_type": "relaybot_answer", "event_payload": {"answer": "a1", "part": 1}},
    )
    plain = await client.conversations_replies(channel=CHANNEL, ts=root)
    other = plain["messages"][1]
    assert (other["subtype"], other["bot_id"], other["username"], "user" in other) == ("bot_message", "B0000CIBOT", "ci", False)
    assert "metadata" not in plain["messages"][2]
    full = await client.conversations_replies(channel=CHANNEL, ts=root, include_all_metadata=True)
    assert full["messages"][2]["metadata"]["event_payload"] == {"answer": "a1", "part": 1}
    assert slack.message(CHANNEL, posted["ts"]).metadata == {"event_type": "relaybot_answer",
                                                              "event_payload": {"answer": "a1", "part": 1}}
    with pytest.raises(SlackApiError) as raised:
        await client.chat_postMessage(channel=CHANNEL, text="x", metadata={"event_payload": {}})
    assert raised.value.response["error"] == "invalid_metadata_format"


async def test_socket_mode_spreads_events_over_every_connection(
    slack_emulator: SlackEmulator,  # noqa: F811
) -> None:
    slack = slack_emulator
    seen: list[list[str]] = [[], []]
    handlers = []


    def recorder(into: list[str]) -> Callable[..., Awaitable[None]]:
        async def on_mention(event: dict) -> None:  # type: ignore[type-arg]
            into.append(event["ts"])

        return on_mention

    for index in range(2):
        app = AsyncApp(client=client_for(slack), signing_secret=slack.signing_secret)
        app.event("app_mention")(recorder(seen[index]))
        handler = AsyncSocketModeHandler(app, app_token=slack.app_token)
        await handler.connect_async()
        handlers.append(handler)
    try:
        assert await eventually(lambda: slack.socket_connection_count == 2)
        for _ in range(4):
            ts = slack.add_user_message(CHANNEL, "hi", "U0000ALICE")
            event = app_mention_event(text="hi", user="U0000ALICE", channel=CHANNEL, ts=ts, team_id=slack.team_id)
            assert await slack.push_socket_event(slack.event_envelope(event), timeout_s=5.0) is not None
        assert await eventually(lambda: len(seen[0]) + len(seen[1]) == 4)
        assert len(seen[0]) == len(seen[1]) == 2
    finally:
        for handler in handlers:
            await handler.close_async()


async def test_deliver_raw_signs_any_bytes_and_channel_ids_lists_channels(
    slack_emulator: SlackEmulator, bolt_url: str  # noqa: F811
) -> None:
    slack = slack_emulator
    assert (await slack.deliver_raw(bolt_url, b'{"type": "event_callback", "event": ')).status != 401
    assert (await slack.deliver_raw(bolt_url, b"{}", sign=False)).status == 401
    stale = int(time.time()) - 600
    assert (await slack.deliver_raw(bolt_url, b"{}", timestamp=stale)).status == 401
    slack.add_user_message("C0000CHAN2", "hi", "U0000ALICE")
    slack.add_user_message(CHANNEL, "hi", "U0000ALICE")
    assert slack.channel_ids == ["C0000CHAN2", CHANNEL]


async def test_markdown_text_is_stored_as_sent_and_refused_beside_text_or_blocks() -> None:
    async with SlackEmulator(limits=False) as slack:
        client = client_for(slack)
        posted = await client.chat_postMessage(channel=CHANNEL, markdown_text="**first** [a](https://x.io/a_(b))")
        record = slack.message(CHANNEL, posted["ts"])
        assert (record.text, record.markdown, record.blocks) == ("**first** [a](https://x.io/a_(b))", True, None)
        await client.chat_update(channel=CHANNEL, ts=posted["ts"], markdown_text="m" * 12_000)  # beyond text's 4,000
        record = slack.message(CHANNEL, posted["ts"])
        assert record.markdown and record.edits[-1].markdown and record.posted_text == "**first** [a](https://x.io/a_(b))"
        await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="plain again")
        assert not slack.message(CHANNEL, posted["ts"]).markdown
        for extra in ({"text": "t"}, {"blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "s"}}]}):
            with pytest.raises(SlackApiError) as raised:
                await client.chat_postMessage(channel=CHANNEL, markdown_text="**x**", **extra)  # type: ignore[arg-type]
            assert raised.value.response["error"] == "markdown_text_conflict"
        with pytest.raises(SlackApiError) as raised:
            await client.chat_update(channel=CHANNEL, ts=posted["ts"], markdown_text="m" * 12_001)
        assert raised.value.response["error"] == "msg_too_long"
