"""read_conversation on Discord end to end: real discord.py through the adapter's reader, the Discord and OpenAI emulators."""

from __future__ import annotations

import json
from typing import Any

from core import wording
from core.store.db import Database
from core.tools import ToolRegistry, builtin_registry
from core.tools.read_conversation import read_conversation_tool
from tests.adapters.discord.harness import make_world, running_bot, wait_for_text
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls


def registry() -> ToolRegistry:
    tools = builtin_registry()
    tools.register(read_conversation_tool())
    return tools


def read(**arguments: Any) -> ToolCalls:
    return ToolCalls([Call("read_conversation", json.dumps(arguments))])


def tool_output(request: dict[str, Any]) -> str:
    [message] = [m for m in request["messages"] if m["role"] == "tool"]
    return str(message["content"])


async def test_summarise_a_thread_of_60_messages_the_bot_never_saw(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    carol = dc.add_user("carol")
    people = (w.alice, w.bob, carol)
    names = {w.alice: "alice", w.bob: "bob", carol: "carol"}
    await dc.send_user_message(w.channel_id, w.bob, "the channel itself: not part of the thread")
    openai_emulator.script(read(scope="thread"), Text("The checkout fix landed."))
    async with running_bot(dc, db, openai_emulator, registry=registry(), discord_message_content_intent=True):
        starter = await dc.send_user_message(w.channel_id, w.alice, "incident 7: checkout is down")
        thread = await dc.start_thread(starter, "incident 7", by=w.alice)
        for n in range(60):
            await dc.send_user_message(thread, people[n % 3], f"update {n:02d} on the checkout fix")
        await dc.send_user_message(thread, w.alice, "summarise this thread", mentions_bot=True)
        await wait_for_text(dc, thread, "The checkout fix landed.")

    output = tool_output(openai_emulator.chat_requests[-1])
    lines = output.splitlines()
    positions = []
    for n in range(60):
        author, text = people[n % 3], f"update {n:02d} on the checkout fix"
        [index] = [i for i, line in enumerate(lines) if line.startswith(f"{names[author]} (") and line.endswith(f": {text}")]
        positions.append(index)
    assert positions == sorted(positions), "oldest first"
    assert "left out" not in lines[0]
    assert "not part of the thread" not in output
    # Read through the thread's own message list, nowhere else.
    listed = {r.path for r in dc.requests_to("message_list")}
    assert listed == {f"/api/v10/channels/{thread}/messages"}


async def test_without_the_message_content_intent_it_says_it_cannot_read_others_messages(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(read(scope="channel"), Text("I can't read them."))
    async with running_bot(dc, db, openai_emulator, registry=registry()):
        await dc.send_user_message(w.channel_id, w.bob, "people talking among themselves")
        asked = await dc.send_user_message(w.channel_id, w.alice, "what did bob say?", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        await wait_for_text(dc, thread.id, "I can't read them.")
    assert tool_output(openai_emulator.chat_requests[-1]) == wording.cannot_read_others_messages()
    assert not dc.requests_to("message_list"), "nothing was read"
