"""The official openai client (sync and async) against relaybot's /v1: answers, streams, usage and errors."""

from __future__ import annotations

import asyncio

import openai
import pytest

from core.store.db import Database
from tests.adapters.api.harness import serve_api
from tests.emulators.openai_server import OpenAIEmulator, Text


async def test_async_client_non_stream_and_stream_with_usage(db: Database, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(Text("Hello from the engine."), Text("Streamed answer."))
    async with serve_api(db, openai_emulator.base_url) as api:
        _, secret = await api.keys.create("async")
        client = openai.AsyncOpenAI(base_url=api.v1, api_key=secret, max_retries=0)
        reply = await client.chat.completions.create(model="classic", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "Hello from the engine."
        assert reply.choices[0].finish_reason == "stop"
        assert reply.usage is not None and reply.usage.completion_tokens > 0
        assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens

        stream = await client.chat.completions.create(
            model="classic", messages=[{"role": "user", "content": "again"}], stream=True,
            stream_options={"include_usage": True},
        )
        text, finish, usage = "", None, None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage is not None:
                usage = chunk.usage
        assert text == "Streamed answer." and finish == "stop"
        assert usage is not None and usage.completion_tokens > 0
        models = await client.models.list()
        assert {m.id for m in models.data} == {"classic", "react", "agentic", "research"}
        await client.close()


async def test_sync_client_in_a_thread(db: Database, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(Text("Sync one."), Text("Sync two."))
    async with serve_api(db, openai_emulator.base_url) as api:
        _, secret = await api.keys.create("sync")

        def call() -> tuple[str, str]:
            with openai.OpenAI(base_url=api.v1, api_key=secret, max_retries=0) as client:
                whole = client.chat.completions.create(
                    model="classic", messages=[{"role": "system", "content": "ignored"},
                                               {"role": "user", "content": "hi"}],
                )
                streamed = "".join(
                    chunk.choices[0].delta.content or ""
                    for chunk in client.chat.completions.create(
                        model="classic", messages=[{"role": "user", "content": "hi"}], stream=True)
                    if chunk.choices
                )
            return whole.choices[0].message.content or "", streamed

        assert await asyncio.to_thread(call) == ("Sync one.", "Sync two.")


async def test_errors_are_the_sdk_exception_types(db: Database, openai_emulator: OpenAIEmulator) -> None:
    async with serve_api(db, openai_emulator.base_url) as api:
        _, secret = await api.keys.create("limited", requests_per_day=1)
        bad = openai.AsyncOpenAI(base_url=api.v1, api_key="rb-not-a-key", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            await bad.chat.completions.create(model="classic", messages=[{"role": "user", "content": "hi"}])
        await bad.close()
        # Default retries: x-should-retry: false must stop the client from asking again.
        client = openai.AsyncOpenAI(base_url=api.v1, api_key=secret)
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(model="classic", messages=[])
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="gpt-17", messages=[{"role": "user", "content": "hi"}])
        await client.chat.completions.create(model="classic", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.RateLimitError) as refused:
            await client.chat.completions.create(model="classic", messages=[{"role": "user", "content": "hi"}])
        assert refused.value.response.headers["x-should-retry"] == "false"
        assert "requests" in refused.value.message
        await client.close()
        # Rejected requests counted nowhere: the one answered is the day's one request.
        key = next(k for k in await api.keys.list() if k.name == "limited")
        assert (await api.keys.used(key))[0] == 1
        assert len(openai_emulator.chat_requests) == 1
