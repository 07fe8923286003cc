"""LLMClient on hostile and large input (issue 21): no per-message SDK walk on the loop, storable text out."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from core.llm import Completion, LLMClient
from tests.core.llm.test_client import MESSAGES, MODEL, TOOLS, _collect
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls


@pytest.fixture
async def llm(openai_emulator: OpenAIEmulator) -> AsyncIterator[LLMClient]:
    client = LLMClient(base_url=openai_emulator.base_url, api_key="sk-secret-test-key", request_timeout_s=5,
                       idle_timeout_s=1, max_retries=0)
    yield client
    await client.aclose()


async def test_a_long_prompt_is_posted_without_the_sdks_per_node_walk(
    llm: LLMClient, openai_emulator: OpenAIEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 21: create()'s TypedDict transform visits every message and part in Python, on the event loop;
    # thousands of history messages stalled it. The params are JSON already and are posted as they are.
    from openai._utils import _transform

    visits = 0
    walk = _transform._async_transform_recursive

    async def counted(*args: object, **kwargs: object) -> object:
        nonlocal visits
        visits += 1
        return await walk(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_transform, "_async_transform_recursive", counted)
    history = [{"role": "user" if n % 2 else "assistant", "content": f"message {n}"} for n in range(2_000)]
    openai_emulator.script(Text("streamed"), Text("whole"))
    pieces = [piece async for piece in llm.stream(model=MODEL, messages=[*history, *MESSAGES], tools=TOOLS)]
    completion = await llm.complete(model=MODEL, messages=[*history, *MESSAGES])
    assert isinstance(pieces[-1], Completion) and pieces[-1].text == "streamed" and completion.text == "whole"
    assert visits == 0
    assert openai_emulator.chat_requests[0]["messages"] == [*history, *MESSAGES]
    assert openai_emulator.chat_requests[0]["tools"] == TOOLS


async def test_nul_and_lone_surrogates_from_the_model_come_out_storable(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    # A page can make the model echo a NUL; JSON's "\ud800" escape parses to a lone surrogate.
    openai_emulator.script(Text("a\x00b\ud800c", chunk_chars=2), ToolCalls([Call("search\x00", '{"q": "x\ud800"}')]))
    pieces, [completion] = await _collect(llm)
    assert "".join(pieces) == completion.text == "ab\ufffdc"
    _, [with_call] = await _collect(llm, tools=TOOLS)
    assert with_call.tool_calls[0].name == "search" and with_call.tool_calls[0].arguments == '{"q": "x\ufffd"}'


async def test_streamed_chunks_are_read_as_json_without_building_sdk_models(
    llm: LLMClient, openai_emulator: OpenAIEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK's pydantic construct took ~160 µs of the event loop per chunk; a long answer streams hundreds.
    import openai._base_client

    built = 0
    construct = openai._base_client.construct_type

    def counted(**kwargs: object) -> object:
        nonlocal built
        built += 1
        return construct(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(openai._base_client, "construct_type", counted)
    openai_emulator.script(Text("x" * 400, chunk_chars=4), ToolCalls([Call("search", '{"q": "a"}'), Call("search", "{}")]))
    pieces, [completion] = await _collect(llm)
    assert len(pieces) == 100 and completion.text == "x" * 400 and completion.usage.completion_tokens > 0
    _, [with_calls] = await _collect(llm, tools=TOOLS)
    assert [(call.name, call.arguments) for call in with_calls.tool_calls] == [("search", '{"q": "a"}'), ("search", "{}")]
    assert with_calls.finish_reason == "tool_calls"
    assert built == 0
