"""Stores against a real Postgres: conversations, exactly-once claims and event dedup."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from core.requests import ConversationKey
from core.store.continuations import ContinuationStore, Decision, StoredCall
from core.store.conversations import ConversationStore, NewMessage
from core.store.db import Database
from core.store.processed_events import ProcessedEvents
from core.store.run_stops import RunStopStore


def _in(seconds: float) -> datetime:
    return datetime.now(timezone.utc) + timedelta(seconds=seconds)


async def _paused(store: ContinuationStore, call_ids: tuple[str, ...] = ("c1",), expires_in: float = 3600) -> uuid.UUID:
    return await store.save(
        conversation_id=None,
        schema_version=1,
        state={"messages": []},
        calls=tuple(StoredCall(call_id=call_id, tool="deploy", arguments="{}") for call_id in call_ids),
        requested_by="U1",
        expires_at=_in(expires_in),
        platform="test",
    )


async def test_conversation_get_or_create_is_stable(db: Database) -> None:
    store = ConversationStore(db)
    key = ConversationKey(platform="slack", workspace="T1", channel="C1", thread="1.2")
    first = await store.get_or_create(key)
    assert await store.get_or_create(key) == first
    assert await store.get_or_create(ConversationKey(platform="slack", workspace="T1", channel="C1")) != first
    assert await store.find(key) == first


async def test_history_keeps_order_and_whole_turns(db: Database) -> None:
    store = ConversationStore(db)
    conversation = await store.get_or_create(ConversationKey(platform="t", workspace="w", channel="history"))
    turns = [uuid.uuid4() for _ in range(3)]
    for index, turn in enumerate(turns):
        await store.append(
            conversation,
            turn,
            [
                NewMessage(role="user", content=f"q{index}", token_count=3, token_encoding="enc"),
                NewMessage(role="assistant", content=f"a{index}", tool_calls=None),
            ],
        )
    history = await store.history(conversation)
    assert [message.content for message in history] == ["q0", "a0", "q1", "a1", "q2", "a2"]
    assert history[0].token_count == 3 and history[0].token_encoding == "enc"
    # A limit that cuts into a turn drops that partial turn.
    clipped = await store.history(conversation, max_messages=3)
    assert [message.content for message in clipped] == ["q2", "a2"]


async def test_twenty_concurrent_claims_have_one_winner(db: Database) -> None:
    store = ContinuationStore(db)
    continuation = await _paused(store)
    assert await store.record_decision(continuation, call_id="c1", decision=Decision(approved=True, actor="U1"))
    results = await asyncio.gather(*(store.claim(continuation, actor=f"U{n}") for n in range(20)))
    winners = [row for row in results if row is not None]
    assert len(winners) == 1
    assert (await store.get(continuation)).status == "resuming"


async def test_claim_waits_for_every_decision(db: Database) -> None:
    store = ContinuationStore(db)
    continuation = await _paused(store, ("a", "b"))
    await store.record_decision(continuation, call_id="a", decision=Decision(approved=True, actor="U1"))
    assert await store.claim(continuation, actor="U1") is None
    # A call decided once cannot be decided again.
    assert await store.record_decision(continuation, call_id="a", decision=Decision(approved=False, actor="U2")) is None
    row = await store.record_decision(continuation, call_id="b", decision=Decision(approved=False, actor="U1", comment="no"))
    assert row is not None and row.undecided == ()
    assert row.decisions["b"] == Decision(approved=False, actor="U1", comment="no")
    assert await store.claim(continuation, actor="U1") is not None


async def test_decide_all_keeps_earlier_decisions(db: Database) -> None:
    store = ContinuationStore(db)
    continuation = await _paused(store, ("a", "b", "c"))
    await store.record_decision(continuation, call_id="a", decision=Decision(approved=False, actor="U1"))
    row = await store.record_decision(continuation, call_id=None, decision=Decision(approved=True, actor="U2"))
    assert row is not None
    assert {call: d.approved for call, d in row.decisions.items()} == {"a": False, "b": True, "c": True}


async def test_expired_rows_close_and_refuse_decisions(db: Database) -> None:
    store = ContinuationStore(db)
    continuation = await _paused(store, expires_in=-1)
    assert await store.record_decision(continuation, call_id="c1", decision=Decision(approved=True, actor="U1")) is None
    expired = await store.expire_due()
    assert continuation in [row.id for row in expired]
    assert (await store.get(continuation)).status == "expired"


async def test_started_calls_run_once_even_after_revert(db: Database) -> None:
    store = ContinuationStore(db)
    continuation = await _paused(store)
    await store.record_decision(continuation, call_id="c1", decision=Decision(approved=True, actor="U1"))
    assert await store.claim(continuation, actor="U1")
    assert await store.mark_started(continuation, "c1") is True
    assert await store.mark_started(continuation, "c1") is False
    reverted = await store.revert_stuck(older_than_s=0)
    assert continuation in [row.id for row in reverted]
    assert await store.claim(continuation, actor="U2")
    assert await store.mark_started(continuation, "c1") is False
    await store.finish(continuation)
    assert (await store.get(continuation)).status == "done"


async def test_twenty_concurrent_dedup_checks_have_one_first(db: Database) -> None:
    events = ProcessedEvents(db)
    results = await asyncio.gather(*(events.first_time("slack", "Ev1") for _ in range(20)))
    assert results.count(True) == 1
    assert await events.first_time("discord", "Ev1") is True
    assert await events.prune(older_than_days=0) >= 0


async def test_embedded_database_keeps_data_across_restart() -> None:
    root = Path(tempfile.mkdtemp(prefix="relaybot-restart-"))
    root.chmod(0o755)  # reachable by the server's own system user when tests run as root
    key = ConversationKey(platform="slack", workspace="T", channel="C")
    try:
        async with Database(url=None, data_dir=root / "data") as database:
            conversation = await ConversationStore(database).get_or_create(key)
        async with Database(url=None, data_dir=root / "data") as database:
            assert await ConversationStore(database).find(key) == conversation
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def test_run_stop_rows_are_forgotten_after_the_retention_only(db: Database) -> None:
    store = RunStopStore(db)
    key = ConversationKey(platform="slack", workspace="T", channel="CSTOPS")
    ended_long_ago, dead_long_ago, ended_lately, going = (str(uuid.uuid4()) for _ in range(4))
    for run_id in (ended_long_ago, dead_long_ago, ended_lately, going):
        await store.started(run_id, key, asked_by="U1")
    await store.ended(ended_long_ago, "answered")
    await store.ended(ended_lately, "answered")
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE run_stops SET ended_at = now() - interval '8 days', seen_at = now() - interval '8 days'"
            " WHERE run_id = %s", (uuid.UUID(ended_long_ago),),
        )
        # A process that died mid-run: its row never ended, and was last seen long ago.
        await conn.execute(
            "UPDATE run_stops SET seen_at = now() - interval '8 days' WHERE run_id = %s", (uuid.UUID(dead_long_ago),)
        )
    assert await store.prune() == 2
    assert await store.get(ended_long_ago) is None and await store.get(dead_long_ago) is None
    assert await store.get(ended_lately) is not None and await store.get(going) is not None
