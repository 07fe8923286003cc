"""The OpenAI emulator speaks the real protocol: the official AsyncOpenAI client talks to it."""

from __future__ import annotations

import json
import math

import openai
import pytest

from tests.emulators.openai_server import JSON, Call, Fault, OpenAIEmulator, Text, ToolCalls, embed_text

MESSAGES = [{"role": "user", "content": "hello there"}]


def _client(emu: OpenAIEmulator) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=emu.base_url, api_key="test-key", max_retries=0, timeout=5)


async def test_streamed_text_reassembles(openai_emulator: OpenAIEmulator) -> None:
    text = "The answer is forty-two, as everybody knows."
    openai_emulator.script(Text(text, chunk_chars=5))
    async with _client(openai_emulator) as client:
        stream = await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
        pieces = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
    assert "".join(pieces) == text
    assert len(pieces) == math.ceil(len(text) / 5)
    assert openai_emulator.chat_requests[0]["messages"] == MESSAGES


async def test_streamed_tool_call_deltas_reassemble(openai_emulator: OpenAIEmulator) -> None:
    first = json.dumps({"query": "quarterly revenue report", "limit": 5})
    second = '{"city": "Oslo"'  # malformed on purpose: the emulator must pass it through as-is
    openai_emulator.script(ToolCalls([Call("search", first, id="call_a"), Call("weather", second)]))
    calls: dict[int, dict[str, str]] = {}
    argument_chunks = 0
    finish_reason = None
    async with _client(openai_emulator) as client:
        stream = await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
        async for chunk in stream:
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            finish_reason = choice.finish_reason or finish_reason
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += delta.id or ""
                if delta.function is not None:
                    entry["name"] += delta.function.name or ""
                    if delta.function.arguments:
                        argument_chunks += 1
                        entry["arguments"] += delta.function.arguments
    assert finish_reason == "tool_calls"
    assert calls[0] == {"id": "call_a", "name": "search", "arguments": first}
    assert calls[1]["name"] == "weather" and calls[1]["arguments"] == second and calls[1]["id"]
    assert argument_chunks > 2  # arguments really were split across chunks


async def test_usage_chunk_only_when_asked(openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(Text("a b c d"), Text("a b c d"))
    async with _client(openai_emulator) as client:
        with_usage = await client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        usages = [chunk.usage async for chunk in with_usage if chunk.usage is not None]
        without = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        none = [chunk.usage async for chunk in without if chunk.usage is not None]
    assert len(usages) == 1 and usages[0].completion_tokens > 0 and usages[0].prompt_tokens > 0
    assert none == []


async def test_non_streamed_completion(openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(JSON({"questions": ["a", "b"]}), ToolCalls([Call("lookup", '{"id": 7}')], text="Checking."))
    async with _client(openai_emulator) as client:
        structured = await client.chat.completions.create(
            model="m", messages=MESSAGES, response_format={"type": "json_object"}
        )
        tools = await client.chat.completions.create(model="m", messages=MESSAGES)
    assert json.loads(structured.choices[0].message.content or "") == {"questions": ["a", "b"]}
    assert structured.choices[0].finish_reason == "stop"
    assert structured.usage is not None and structured.usage.prompt_tokens > 0
    assert tools.choices[0].finish_reason == "tool_calls"
    assert tools.choices[0].message.content == "Checking."
    [call] = tools.choices[0].message.tool_calls or []
    assert call.function.name == "lookup" and call.function.arguments == '{"id": 7}'
    assert openai_emulator.chat_requests[0]["response_format"] == {"type": "json_object"}


async def test_default_reply_and_script_fn(openai_emulator: OpenAIEmulator) -> None:
    async with _client(openai_emulator) as client:
        default = await client.chat.completions.create(model="m", messages=MESSAGES)
        openai_emulator.script_fn(lambda body: Text(f"echo {body['messages'][-1]['content']}"))
        echoed = await client.chat.completions.create(model="m", messages=MESSAGES)
    assert default.choices[0].message.content == "ok"
    assert echoed.choices[0].message.content == "echo hello there"


async def test_http_faults(openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(Fault("500"), Fault("429"))
    async with _client(openai_emulator) as client:
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="m", messages=MESSAGES)
        with pytest.raises(openai.RateLimitError) as rate_limited:
            await client.chat.completions.create(model="m", messages=MESSAGES)
    assert rate_limited.value.response.headers["Retry-After"] == "1"


async def test_cut_stream_raises_connection_error(openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(Fault("cut", text="partial text here"))
    received = []
    async with _client(openai_emulator) as client:
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        with pytest.raises(openai.APIConnectionError):
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    received.append(chunk.choices[0].delta.content)
    assert "".join(received) == "partial text here"


async def test_stall_does_not_hang_shutdown() -> None:
    async with OpenAIEmulator() as emu:
        emu.script(Fault("stall"))
        client = openai.AsyncOpenAI(base_url=emu.base_url, api_key="k", max_retries=0, timeout=0.3)
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        with pytest.raises(openai.APITimeoutError):
            async for _ in stream:
                pass
        await client.close()
    # Leaving the block returned: the stalled handler was released.


async def test_embeddings_are_deterministic_and_normalised(openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.embedding_dim = 64
    async with _client(openai_emulator) as client:
        floats = await client.embeddings.create(model="e", input=["red apple pie", "apple pie red"], encoding_format="float")
        default = await client.embeddings.create(model="e", input="red apple pie")
    a, b = floats.data[0].embedding, floats.data[1].embedding
    assert len(a) == 64
    assert a == pytest.approx(b)  # bag of words: order does not matter
    assert sum(v * v for v in a) == pytest.approx(1.0)
    assert default.data[0].embedding == pytest.approx(a, abs=1e-6)
    assert a == pytest.approx(embed_text("red apple pie", 64))
    assert openai_emulator.embedding_calls == 2
    assert openai_emulator.embedding_inputs == [["red apple pie", "apple pie red"], ["red apple pie"]]


async def test_models_and_api_key_check() -> None:
    async with OpenAIEmulator(api_key="right") as emu:
        async with openai.AsyncOpenAI(base_url=emu.base_url, api_key="right", max_retries=0) as client:
            ids = [model.id async for model in client.models.list()]
        async with openai.AsyncOpenAI(base_url=emu.base_url, api_key="wrong", max_retries=0) as client:
            with pytest.raises(openai.AuthenticationError):
                await client.models.list()
    assert ids == emu.models
