"""Live changes to chosen channels: new messages, edits, deletes and renames reflected in search; a burst coalesced;
changes about channels nobody chose cost no database read; a random sequence always leaves the index as the rows
would build it from scratch."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import pytest

from core.learning.model import ChannelChange, ChannelPlace
from core.retrieval.embeddings import LocalEmbeddings
from core.retrieval.retriever import SourceScope
from core.retrieval.search import PgRetriever
from core.store.db import Database
from tests.core.learning.paged_history import T0, Channel, PagedHistory, msg, ts
from tests.core.learning.support import PLACE, indexed, rebuilt_from_scratch, service, stored_ids

EVERY_SOURCE = SourceScope(owners=None, every_restricted=True)


@pytest.fixture(scope="module")
def local_embedder() -> LocalEmbeddings:
    return LocalEmbeddings()


@pytest.fixture(autouse=True)
async def empty_tables(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")


def change(message=None, **fields) -> ChannelChange:
    return ChannelChange(kind=fields.pop("kind", "message"), place=fields.pop("place", PLACE), message=message, **fields)


def small_channel() -> Channel:
    channel = Channel()
    channel.put(msg(0, "The coffee machine on floor three is broken", author="Ana"))
    return channel


async def found(retriever: PgRetriever, query: str) -> list[str]:
    return [item.text for item in await retriever.search(query, limit=5, scope=EVERY_SOURCE)]


async def test_edits_deletes_and_renames_are_reflected_in_search(db: Database, local_embedder: LocalEmbeddings) -> None:
    retriever = PgRetriever(db, local_embedder)
    async with service(db, embedder=local_embedder) as learning:
        learning.attach("slack", PagedHistory({"C1": small_channel()}))
        await learning.add(PLACE, since_days=3650, keep_days=None)
        await learning.run_due()
        hits = await retriever.search("coffee machine broken", limit=3, scope=EVERY_SOURCE)
        assert hits and hits[0].title == "#incidents — 2026-11-03" and hits[0].source == "channel:slack:T1:C1"
        assert hits[0].uri.startswith("https://example.slack.com/archives/C1/p")
        await learning.take(change(msg(5, "Kettle descaling is scheduled for Tuesday", author="Bo")))
        await learning.settled()
        assert any("Bo: Kettle descaling" in text for text in await found(retriever, "kettle descaling"))
        await learning.take(change(dataclasses.replace(msg(5, "Kettle replaced with a samovar", author="Bo"))))
        await learning.settled()
        assert any("samovar" in text for text in await found(retriever, "samovar"))
        assert not any("descaling" in text for text in await found(retriever, "descaling"))
        await learning.take(change(kind="deleted", message_id=ts(5)))
        # Gone as soon as the change is taken: no waiting for a rebuild.
        assert not any("samovar" in text for text in await found(retriever, "samovar"))
        await learning.take(change(kind="renamed", name="facilities"))
        hits = await retriever.search("coffee machine", limit=3, scope=EVERY_SOURCE)
        assert hits[0].title == "#facilities — 2026-11-03"
        assert (await learning.get(PLACE)).name == "facilities"


async def test_a_thread_reply_makes_its_root_a_thread_document(db: Database) -> None:
    async with service(db) as learning:
        learning.attach("slack", PagedHistory({"C1": small_channel()}))
        await learning.add(PLACE, since_days=3650, keep_days=None)
        await learning.run_due()
        await learning.take(change(msg(1, "Facilities know, a new one comes Monday", author="Cy", thread=ts(0))))
        await learning.settled()
    documents = await indexed(db)
    assert list(documents) == [f"thread:{ts(0)}"]
    title, uri, chunks = documents[f"thread:{ts(0)}"]
    assert title == "#incidents — 2026-11-03, thread by Ana"
    assert chunks == ("[2026-11-03 09:00] Ana: The coffee machine on floor three is broken\n\n"
                      "[2026-11-03 09:01] Cy: Facilities know, a new one comes Monday",)


async def test_a_burst_of_changes_to_one_document_is_coalesced(db: Database) -> None:
    async with service(db, rebuild_interval_s=0.3) as learning:
        learning.attach("slack", PagedHistory({"C1": small_channel()}))
        await learning.add(PLACE, since_days=3650, keep_days=None)
        await learning.run_due()
        before = learning.rebuilds.builds
        for n in range(20):
            await learning.take(change(msg(0, f"The coffee machine on floor three is broken (edit {n})")))
        await learning.settled()
        assert learning.rebuilds.builds - before < 20
    [(_, _, chunks)] = (await indexed(db)).values()
    assert chunks[0].endswith("(edit 19)")


class CountingDatabase(Database):
    """The real database, counting every connection taken from its pool (each is at least one statement)."""

    taken = 0

    @asynccontextmanager
    async def connection(self) -> AsyncIterator:
        self.taken += 1
        async with super().connection() as conn:
            yield conn


async def test_a_change_about_a_channel_nobody_chose_reads_nothing(database_url: str, tmp_path: Path) -> None:
    counting = CountingDatabase(url=database_url, data_dir=tmp_path)
    await counting.open()
    try:
        async with service(counting, chosen_refresh_s=3600) as learning:
            learning.attach("slack", PagedHistory({"C1": small_channel()}))
            await learning.add(PLACE, since_days=3650, keep_days=None)
            await learning.take(change(kind="member", user="U1"))  # the chosen channels are in memory from here
            counting.taken = 0
            other = ChannelPlace(platform="slack", workspace="T1", channel="C2")
            for n in range(50):
                await learning.take(change(msg(n, "chatter nobody chose to learn"), place=other))
                await learning.take(change(kind="deleted", place=other, message_id=ts(n)))
            await learning.take(change(kind="left", place=dataclasses.replace(other, workspace="T2")))
            assert not learning.chosen(other) and learning.chosen(PLACE)  # what an adapter asks first, from memory
            assert counting.taken == 0 and learning.dropped == 101
            await learning.take(change(msg(3, "this one is chosen")))
            assert counting.taken > 0
    finally:
        await counting.close()


async def test_a_random_sequence_of_changes_keeps_the_index_equal_to_a_rebuild_from_scratch(db: Database) -> None:
    rng = random.Random(24)
    live: dict[str, object] = {}
    async with service(db, stretch=3, rebuild_interval_s=0.01) as learning:
        learning.attach("slack", PagedHistory({"C1": Channel()}))
        await learning.add(PLACE, since_days=3650, keep_days=None)
        await learning.run_due()
        for step in range(120):
            roll = rng.random()
            if roll < 0.45 or not live:  # a new message, some a day later, some replies
                minute = rng.choice([rng.uniform(0, 600), rng.uniform(1440, 1500)])
                roots = [m for m in live.values() if not m.thread or m.thread == m.id]
                thread = rng.choice(roots).id if roots and rng.random() < 0.3 else ""
                message = msg(minute, f"step {step} says {rng.choice(['alpha', 'beta', 'gamma'])}",
                              author=rng.choice(["Ana", "Bo", "Cy"]), thread=thread, by_bot=rng.random() < 0.1)
                live[message.id] = message
                await learning.take(change(message))
            elif roll < 0.75:  # an edit
                message = dataclasses.replace(rng.choice(list(live.values())), text=f"edited at step {step}")
                live[message.id] = message
                await learning.take(change(message))
            else:  # a delete
                message_id = rng.choice(list(live))
                del live[message_id]
                await learning.take(change(kind="deleted", message_id=message_id))
            if step % 10 == 9:
                await learning.settled()
                assert await indexed(db) == await rebuilt_from_scratch(db), f"after step {step}"
                assert sorted(await stored_ids(db)) == sorted(live)
        await learning.settled()
    documents = await indexed(db)
    assert documents == await rebuilt_from_scratch(db)
    texts = "\n".join("\n".join(chunks) for _, _, chunks in documents.values())
    for message in live.values():
        assert (message.text in texts) != message.by_bot  # every person's message learnt, no bot's
    async with db.connection() as conn:
        rows = await (await conn.execute(
            "SELECT document, count(*) FROM channel_messages WHERE thread = '' GROUP BY document")).fetchall()
    assert all(count <= 3 for _, count in rows)


class HeldEmbeddings:
    """The local model, each call held until `go` is set: a process caught between reading a document and writing it."""

    def __init__(self, model: LocalEmbeddings) -> None:
        self.model = model
        self.name, self.dimension = model.name, model.dimension
        self.waiting = asyncio.Event()
        self.go = asyncio.Event()

    async def embed(self, texts):
        self.waiting.set()
        await self.go.wait()
        return await self.model.embed(texts)


async def test_a_process_whose_read_went_stale_while_it_embedded_builds_the_document_again(
    db: Database, local_embedder: LocalEmbeddings
) -> None:
    held = HeldEmbeddings(local_embedder)
    async with service(db, embedder=held) as slow, service(db, embedder=local_embedder) as fast:
        held.go.set()
        slow.attach("slack", PagedHistory({"C1": small_channel()}))
        await slow.add(PLACE, since_days=3650, keep_days=None)
        await slow.run_due()
        await fast.take(ChannelChange(kind="member", place=PLACE, user="U1"))  # it knows the channel is chosen
        held.go.clear()
        held.waiting.clear()
        await slow.take(change(msg(1, "first reply, read by the slow process", thread=ts(0))))
        await held.waiting.wait()  # it read the thread and is embedding it
        await fast.take(change(msg(2, "second reply, written meanwhile by the other", author="Bo", thread=ts(0))))
        await fast.settled()
        held.go.set()
        await slow.settled()
    assert await indexed(db) == await rebuilt_from_scratch(db)
    [(_, _, chunks)] = (await indexed(db)).values()
    assert "second reply" in chunks[-1]


async def test_a_message_with_nul_and_a_lone_surrogate_is_stored_and_found(db: Database) -> None:
    retriever = PgRetriever(db, None)
    async with service(db) as learning:
        learning.attach("slack", PagedHistory({"C1": small_channel()}))
        await learning.add(PLACE, since_days=3650, keep_days=None)
        await learning.run_due()
        hostile = dataclasses.replace(msg(3, "the vault\x00 code rotates \ud800 weekly", author="Mal\udfff"),
                                      files=("notes\x00.txt",))
        await learning.take(change(hostile))
        await learning.settled()
        await learning.take(change(kind="renamed", name="inci\x00dents"))
    [text] = [t for t in await found(retriever, "vault code rotates") if "vault" in t]
    assert "Mal\ufffd: the vault code rotates \ufffd weekly (file: notes.txt)" in text
    assert (await learning.get(PLACE)).name == "incidents"
