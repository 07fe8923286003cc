"""`relaybot run` builds its token counters before any event, off the event loop: tiktoken takes ~250 ms to build an
encoding, which stalled the loop at every start when the registry's tools built it there."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import tiktoken

from bot.runtime import warm_up_process
from core import tokens


async def test_the_token_counters_are_built_in_a_worker_thread_before_the_first_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built_on: list[int] = []
    get_encoding = tiktoken.get_encoding

    def recording(name: str) -> Any:
        built_on.append(threading.get_ident())
        return get_encoding(name)

    monkeypatch.setattr(tiktoken, "get_encoding", recording)
    tokens.get_token_counter.cache_clear()
    tokens._load_offline_encoding.cache_clear()
    try:
        await warm_up_process("gpt-4o-mini")
        assert built_on, "no encoding was built at start"
        assert threading.get_ident() not in built_on  # never on the event loop's thread
        built = len(built_on)
        tokens.get_token_counter("gpt-4o-mini").count("ready")
        tokens.get_token_counter().count("ready")
        assert len(built_on) == built  # the tools and the engine find them built
    finally:
        tokens.get_token_counter.cache_clear()
        tokens._load_offline_encoding.cache_clear()
