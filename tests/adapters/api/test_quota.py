"""Quotas hold across processes (two API servers, one database), and token reservations hold per model call."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from core.api_access import api_conversation_key
from core.quota import Grant, QuotaExceeded, TokenQuota
from core.requests import Actor, ConversationKey
from core.store.api_keys import ApiKeyStore
from core.store.db import Database
from tests.adapters.api.harness import auth, serve_api
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls


async def test_twenty_concurrent_requests_over_two_servers_take_exactly_ten(
    db: Database, database_url: str, tmp_path: Path, openai_emulator: OpenAIEmulator
) -> None:
    other_db = Database(url=database_url, data_dir=tmp_path / "second")
    await other_db.open()
    try:
        async with serve_api(db, openai_emulator.base_url) as first, serve_api(other_db, openai_emulator.base_url) as second, \
                aiohttp.ClientSession() as http:
            _, secret = await first.keys.create("ten", requests_per_day=10)

            async def ask(url: str, n: int) -> tuple[int, dict]:
                async with http.post(f"{url}/api/answer", json={"question": f"q{n}"}, headers=auth(secret)) as response:
                    return response.status, await response.json()

            results = await asyncio.gather(*(ask((first, second)[n % 2].url, n) for n in range(20)))
            statuses = [status for status, _ in results]
            assert statuses.count(200) == 10 and statuses.count(429) == 10
            refusal = next(body for status, body in results if status == 429)["error"]
            assert refusal["limit"] == "requests_per_day" and refusal["resets_at"]
            assert len(openai_emulator.chat_requests) == 10
    finally:
        await other_db.close()


async def test_thirty_concurrent_reservations_never_hold_more_than_the_day(db: Database) -> None:
    keys = ApiKeyStore(db)
    key, _ = await keys.create("reserve fifty", tokens_per_day=50)
    quota = TokenQuota([keys])
    where = api_conversation_key(key.id, "c")

    async def reserve() -> Grant | QuotaExceeded:
        try:
            return await quota.reserve(conversation=where, user=Actor(id="u"), prompt_tokens=5, max_output=10)
        except QuotaExceeded as refused:
            return refused

    outcomes = await asyncio.gather(*(reserve() for _ in range(30)))
    grants = [outcome for outcome in outcomes if isinstance(outcome, Grant)]
    refusals = [outcome for outcome in outcomes if isinstance(outcome, QuotaExceeded)]
    assert sum(grant.held[0].tokens for grant in grants) == (await keys.used(key))[1] == 45
    assert len(grants) == 3 and len(refusals) == 27  # 15 + 15 + 15, and 5 left is less than a prompt and a token
    assert all(r.refusal.sentence.startswith("This key has used its 50 tokens for today") for r in refusals)
    for grant in grants:
        await grant.settle(7)  # the model used less: the rest is given back
    assert (await keys.used(key))[1] == 21
    # What is left is granted, clamped: the call may ask for 24 tokens of output, not 10 more than the day holds.
    clamped = await quota.reserve(conversation=where, user=Actor(id="u"), prompt_tokens=5, max_output=4096)
    assert clamped.max_output == 24 and (await keys.used(key))[1] == 50
    # A chat conversation is no key's: nothing is reserved, nothing limits it.
    assert not quota.applies(conversation=ConversationKey(platform="slack", workspace="T", channel="C"), user=Actor(id="u"))


async def test_each_model_call_of_an_agentic_run_reserves_and_settles(db: Database, openai_emulator: OpenAIEmulator) -> None:
    openai_emulator.script(ToolCalls([Call("calculator", '{"expression": "6*7"}', id="call_calc")]), Text("42."))
    async with serve_api(db, openai_emulator.base_url) as api, aiohttp.ClientSession() as http:
        key, secret = await api.keys.create("per call", tokens_per_day=3000)
        async with http.post(f"{api.url}/api/answer", json={"question": "6*7?"}, headers=auth(secret)) as response:
            assert response.status == 200, await response.text()
            body = await response.json()
        first, second = openai_emulator.chat_requests
        # Each call asked for what was left of the day then: the second after the first had settled.
        assert 0 < second["max_tokens"] < first["max_tokens"] < 3000
        assert (await api.keys.used(key))[1] == body["usage"]["total_tokens"] > 0


async def test_a_key_without_a_token_limit_still_counts_what_its_calls_used(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    openai_emulator.script(Text("Counted."))
    async with serve_api(db, openai_emulator.base_url) as api, aiohttp.ClientSession() as http:
        key, secret = await api.keys.create("unlimited")
        async with http.post(f"{api.url}/api/answer", json={"question": "count me"}, headers=auth(secret)) as response:
            body = await response.json()
        assert (await api.keys.used(key)) == (1, body["usage"]["total_tokens"])
        assert "max_tokens" not in openai_emulator.chat_requests[0]  # nothing to clamp: the model's own limit


async def test_a_chat_run_never_asks_the_api_keys_ledger(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = ApiKeyStore(db)
    asked: list[ConversationKey] = []
    real_account = keys.account

    def account(conversation: ConversationKey, user: Actor) -> str | None:
        asked.append(conversation)
        return real_account(conversation, user)

    monkeypatch.setattr(keys, "account", account)
    quota = TokenQuota([keys])
    slack = ConversationKey(platform="slack", workspace="T1", channel="C1", thread="1.0")
    assert not quota.applies(conversation=slack, user=Actor(id="U1"))
    grant = await quota.reserve(conversation=slack, user=Actor(id="U1"), prompt_tokens=5, max_output=10)
    assert grant.held == () and asked == []
    key, _ = await keys.create("asked", tokens_per_day=50)
    assert quota.applies(conversation=api_conversation_key(key.id, "c"), user=Actor(id="u"))
    assert asked == [api_conversation_key(key.id, "c")]
