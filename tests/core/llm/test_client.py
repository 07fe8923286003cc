"""LLMClient against the OpenAI emulator: streaming, tool calls, retries, timeouts, model table."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from core.events import Usage
from core.llm import Completion, LLMClient, LLMError, ModelInfo, TextPiece, resolve_model
from tests.emulators.openai_server import JSON, Call, Fault, OpenAIEmulator, Text, ToolCalls

MESSAGES = [{"role": "user", "content": "What is the answer?"}]
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}}]
MODEL = resolve_model("gpt-4o-mini")
IDLE_TIMEOUT_S = 0.3


@pytest.fixture
async def llm(openai_emulator: OpenAIEmulator) -> AsyncIterator[LLMClient]:
    client = LLMClient(
        base_url=openai_emulator.base_url,
        api_key="sk-secret-test-key",
        request_timeout_s=5,
        idle_timeout_s=IDLE_TIMEOUT_S,
        max_retries=2,
        retry_backoff_s=0.01,
    )
    yield client
    await client.aclose()


async def _collect(llm: LLMClient, **kwargs: object) -> tuple[list[str], list[Completion]]:
    pieces: list[str] = []
    completions: list[Completion] = []
    async for item in llm.stream(model=kwargs.pop("model", MODEL), messages=MESSAGES, **kwargs):  # type: ignore[arg-type]
        if isinstance(item, TextPiece):
            assert not completions, "no text may follow the Completion"
            pieces.append(item.text)
        else:
            completions.append(item)
    return pieces, completions


async def test_text_pieces_join_to_completion_text(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    text = "Forty-two is the answer, computed over seven and a half million years."
    openai_emulator.script(Text(text, chunk_chars=6))
    pieces, [completion] = await _collect(llm)
    assert len(pieces) > 3
    assert "".join(pieces) == completion.text == text
    assert completion.tool_calls == ()
    assert completion.finish_reason == "stop"
    assert completion.usage.completion_tokens > 0 and completion.usage.prompt_tokens > 0
    request = openai_emulator.chat_requests[0]
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}


async def test_two_tool_calls_in_one_turn(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    first = json.dumps({"query": "holiday policy for contractors", "top_k": 3})
    second = json.dumps({"expression": "12 * (3 + 4)"})
    openai_emulator.script(ToolCalls([Call("search", first, id="call_1"), Call("calculator", second, id="call_2")]))
    pieces, [completion] = await _collect(llm, tools=TOOLS)
    assert pieces == []
    assert completion.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in completion.tool_calls] == [
        ("call_1", "search", first),
        ("call_2", "calculator", second),
    ]
    assert openai_emulator.chat_requests[0]["tools"] == TOOLS


async def test_malformed_tool_arguments_arrive_raw(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    broken = '{"query": "unterminated'
    openai_emulator.script(ToolCalls([Call("search", broken)]))
    _, [completion] = await _collect(llm)
    [call] = completion.tool_calls
    assert call.arguments == broken and call.name == "search" and call.id


async def test_500_is_retried_then_succeeds(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(Fault("500"), Fault("429", retry_after_s=0.01), Text("fine"))
    pieces, [completion] = await _collect(llm)
    assert "".join(pieces) == completion.text == "fine"
    assert len(openai_emulator.chat_requests) == 3


async def test_500_every_time_gives_llm_error(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script_fn(lambda body: Fault("500"))
    with pytest.raises(LLMError) as caught:
        await _collect(llm)
    assert caught.value.retryable and caught.value.kind == "server" and caught.value.status == 500
    assert len(openai_emulator.chat_requests) == 3  # first try + max_retries
    assert "sk-secret" not in caught.value.message


async def test_failure_after_text_started_is_not_retried(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(Fault("cut", text="Half an ans"), Text("never sent"))
    pieces: list[str] = []
    with pytest.raises(LLMError) as caught:
        async for item in llm.stream(model=MODEL, messages=MESSAGES):
            assert isinstance(item, TextPiece)
            pieces.append(item.text)
    assert "".join(pieces) == "Half an ans"
    assert caught.value.retryable
    assert len(openai_emulator.chat_requests) == 1


async def test_stall_fails_after_idle_timeout(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(Fault("stall", text="Thinking about it"))
    with pytest.raises(LLMError) as caught:
        await _collect(llm)
    assert caught.value.kind == "stall" and caught.value.retryable
    assert "try again" in caught.value.message
    assert len(openai_emulator.chat_requests) == 1


async def test_cut_stream_gives_llm_error(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script_fn(lambda body: Fault("cut", text=""))
    with pytest.raises(LLMError) as caught:
        await _collect(llm)
    assert caught.value.kind in ("cut", "connection") and caught.value.retryable
    # Nothing had streamed, so the client was allowed to try again.
    assert len(openai_emulator.chat_requests) == 3


async def test_auth_failure_is_not_retried() -> None:
    async with OpenAIEmulator(api_key="right-key") as emu:
        llm = LLMClient(base_url=emu.base_url, api_key="sk-wrong-key", request_timeout_s=5, idle_timeout_s=1)
        try:
            with pytest.raises(LLMError) as caught:
                await _collect(llm)
            with pytest.raises(LLMError):
                await llm.check()
        finally:
            await llm.aclose()
    assert caught.value.kind == "auth" and not caught.value.retryable
    assert "sk-wrong-key" not in caught.value.message and "sk-wrong-key" not in repr(caught.value)
    assert len(emu.chat_requests) == 0  # refused before the body was recorded


async def test_complete_returns_structured_output(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(Fault("500"), JSON({"sub_questions": ["who", "when"]}))
    fmt = {"type": "json_object"}
    completion = await llm.complete(model=MODEL, messages=MESSAGES, response_format=fmt, temperature=0.2, max_tokens=50)
    assert json.loads(completion.text) == {"sub_questions": ["who", "when"]}
    assert completion.finish_reason == "stop" and completion.usage.prompt_tokens > 0
    request = openai_emulator.chat_requests[-1]
    assert request["response_format"] == fmt and request["temperature"] == 0.2 and request["max_tokens"] == 50
    assert "stream" not in request or request["stream"] is False


async def test_complete_returns_tool_calls(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(ToolCalls([Call("search", "{}", id="c1"), Call("search", '{"q": 1}', id="c2")]))
    completion = await llm.complete(model=MODEL, messages=MESSAGES, tools=TOOLS)
    assert [(c.id, c.arguments) for c in completion.tool_calls] == [("c1", "{}"), ("c2", '{"q": 1}')]


async def test_upstream_id_is_sent_instead_of_configured_name(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    model = resolve_model("team-assistant", upstream_id="gpt-4o-mini")
    assert model.context_limit == 128_000  # capabilities come from the upstream model
    await _collect(llm, model=model)
    assert openai_emulator.chat_requests[0]["model"] == "gpt-4o-mini"


async def test_reasoning_models_get_max_completion_tokens(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    await _collect(llm, model=resolve_model("o3-mini"), temperature=0.5, max_tokens=100)
    request = openai_emulator.chat_requests[0]
    assert request["max_completion_tokens"] == 100
    assert "max_tokens" not in request and "temperature" not in request


async def test_check_reports_models(llm: LLMClient, openai_emulator: OpenAIEmulator) -> None:
    status = await llm.check()
    assert "127.0.0.1" in status and "2 models" in status and "\n" not in status


async def test_check_unreachable_endpoint_raises() -> None:
    emu = OpenAIEmulator()
    await emu.start()
    url = emu.base_url
    await emu.stop()
    llm = LLMClient(base_url=url, api_key="k", request_timeout_s=2, idle_timeout_s=1)
    try:
        with pytest.raises(LLMError) as caught:
            await llm.check()
    finally:
        await llm.aclose()
    assert caught.value.kind == "connection" and caught.value.retryable


def test_unknown_model_gets_safe_defaults() -> None:
    info = resolve_model("my-local-finetune")
    assert info == ModelInfo(
        name="my-local-finetune",
        upstream_id="my-local-finetune",
        context_limit=8192,
        supports_tools=True,
        supports_structured_output=False,
        supports_vision=False,
        max_output_tokens=4096,
    )


@pytest.mark.parametrize(
    ("name", "context_limit", "vision"),
    [
        ("gpt-4o", 128_000, True),
        ("gpt-4o-2024-08-06", 128_000, True),
        ("gpt-4.1-mini", 1_047_576, True),
        ("o3-mini", 200_000, False),
        ("meta-llama/Llama-3.1-8B-Instruct", 131_072, False),
        ("llama3.1:8b", 131_072, False),
        ("qwen2.5-vl:7b", 32_768, True),
        ("mistral-large-latest", 131_072, False),
        ("o10-preview", 8192, False),  # "o1" must not claim it
    ],
)
def test_known_model_table(name: str, context_limit: int, vision: bool) -> None:
    info = resolve_model(name)
    assert (info.context_limit, info.supports_vision) == (context_limit, vision)


def test_overrides_apply_and_are_checked() -> None:
    info = resolve_model("gpt-4o", overrides={"context_limit": "32000", "supports_vision": "false"})
    assert info.context_limit == 32000 and info.supports_vision is False
    assert info.supports_structured_output is True
    with pytest.raises(ValueError, match="context_window"):
        resolve_model("gpt-4o", overrides={"context_window": 1})
    with pytest.raises(ValueError, match="whole number"):
        resolve_model("gpt-4o", overrides={"max_output_tokens": "lots"})


def test_usage_type_is_the_event_usage() -> None:
    assert Completion(text="").usage == Usage()


async def test_complete_stall_and_cut_give_llm_errors(openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(Fault("stall"), Fault("cut"))
    llm = LLMClient(base_url=openai_emulator.base_url, api_key="k", request_timeout_s=0.3, idle_timeout_s=0.3, max_retries=0)
    try:
        with pytest.raises(LLMError) as stalled:
            await llm.complete(model=MODEL, messages=MESSAGES)
        with pytest.raises(LLMError) as cut:
            await llm.complete(model=MODEL, messages=MESSAGES)
    finally:
        await llm.aclose()
    assert stalled.value.kind == "timeout" and stalled.value.retryable
    assert cut.value.kind == "connection" and cut.value.retryable
