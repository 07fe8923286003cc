"""A third platform is a folder and one table entry: the toy chat (tests/support/toychat) joins Slack and Discord
through the real entry point (Runtime, doctor) and answers a mention, streams, and resumes on an approval click."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from bot.doctor import run_checks
from bot.platforms import PLATFORMS
from bot.runtime import Runtime
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import test_settings as settings_for
from tests.support.toychat.emulator import ToyChatServer
from tests.support.toychat.platform import TOYCHAT

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")
ANSWER = "Done: a reminder of the stand-up will be posted in this thread in two hours."


async def waited(find: Callable[[], T | None], *, limit_s: float = 15.0) -> T:
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while (found := find()) is None:
        assert loop.time() < deadline, "the toy chat never showed it"
        await asyncio.sleep(0.02)
    return found


@pytest.fixture
async def toychat() -> ToyChatServer:
    server = ToyChatServer()
    await server.start()
    yield server  # type: ignore[misc]
    await server.stop()


async def test_a_third_platform_answers_streams_and_resumes_on_a_click_through_the_shared_runner(
    database_url: str, openai_emulator: OpenAIEmulator, toychat: ToyChatServer, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    platforms = (*PLATFORMS, TOYCHAT)
    settings = settings_for(
        openai_emulator.base_url, database_url=database_url, data_dir=tmp_path, http_port=0, toychat_url=toychat.url,
    )
    await run_checks(settings, platforms=platforms)
    doctor = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert doctor["toychat"] == f"ok — toy chat at {toychat.url}"
    assert doctor["slack"].startswith("not configured") and doctor["discord"].startswith("not configured")

    call = Call("create_reminder", json.dumps({"text": "stand-up", "when": "in 2 hours"}), id="call_1")
    openai_emulator.script(ToolCalls([call], text="I can set that."), Text(ANSWER, chunk_chars=6, delay_s=0.04))
    runtime = Runtime(settings, platforms=platforms)
    try:
        await runtime.start()
        assert [adapter.platform for adapter in runtime.adapters] == ["toychat"]
        thread = await toychat.say(channel="general", user="ann", text="@bot remind me of the stand-up in 2 hours")
        approval = await waited(lambda: next((m for m in toychat.in_thread(thread) if m.buttons), None))
        assert "ann asks to run" in approval.text and "create_reminder" in approval.text
        assert any(m.text == "I can set that." for m in toychat.in_thread(thread))

        approve = next(b["value"] for b in approval.buttons if b["label"] == "Approve")
        await toychat.press(approval.id, user="ann", value=approve)
        final = await waited(lambda: next((m for m in toychat.in_thread(thread) if m.text == ANSWER), None))
        # Streamed: the answer message showed a part of the text before its final edit.
        partial = [v["text"] for v in final.versions[:-1] if v["text"].rstrip(" ▌") and ANSWER.startswith(v["text"].rstrip(" ▌"))]
        assert partial and len(partial[0]) < len(ANSWER), [v["text"] for v in final.versions]
        # The click was settled by the shared runner: the approval message redrawn without its buttons.
        redrawn = toychat.messages[approval.id]
        assert redrawn.buttons == [] and "approved by ann" in redrawn.text
        assert toychat.whispers == []
    finally:
        await runtime.stop()


async def test_the_http_api_starts_and_stops_in_the_platforms_lifecycle(
    database_url: str, openai_emulator: OpenAIEmulator, toychat: ToyChatServer, tmp_path: Path
) -> None:
    """The API is one more service of the runtime's lifecycle: started after the HTTP server with the platform
    adapters, and refusing new requests when they stop taking events (the first step of a shutdown)."""
    import aiohttp

    settings = settings_for(
        openai_emulator.base_url, database_url=database_url, data_dir=tmp_path, http_port=0, toychat_url=toychat.url,
        api_enabled=True,
    )
    runtime = Runtime(settings, platforms=(*PLATFORMS, TOYCHAT))
    try:
        await runtime.start()
        assert runtime.services[: len(runtime.adapters)] == runtime.adapters and len(runtime.services) == 2
        url = f"http://127.0.0.1:{runtime.http.port}/api/answer"
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json={"question": "hi"}) as response:
                assert response.status == 401  # serving: a request without a key is refused for that
            for service in runtime.services:
                await service.stop_accepting()
            async with session.post(url, json={"question": "hi"}) as response:
                assert response.status == 503 and "shutting down" in (await response.json())["error"]["message"]
    finally:
        await runtime.stop()
