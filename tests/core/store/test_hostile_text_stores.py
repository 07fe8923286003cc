"""Outside text the stores write (issue 21 fuzz): a 👎's comment, a channel setting's value and an ingested document's
title and text, each with NUL or a lone surrogate, are stored (each failed its insert before)."""

from __future__ import annotations

from pathlib import Path

from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.loaders import BINARY_SNIFF_BYTES
from core.retrieval.search import PgRetriever
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from core.store.feedback import FeedbackStore
from tests.core.store.test_feedback import stored_turn


async def test_a_feedback_comment_and_name_with_nul_and_a_lone_surrogate_are_stored(db: Database) -> None:
    store = FeedbackStore(db)
    turn = await stored_turn(db, "How do I deploy?", "Run make deploy.")
    assert await store.comment(turn, user_id="U-hostile", user_name="Ada\ud800", platform="discord",
                               text="  out\x00 of date \udfff ")
    assert await store.vote(turn, user_id="U-hostile", user_name="Ada\x00", platform="discord", up=False)
    [row] = [row for row in await store.export() if row.user_id == "U-hostile"]
    assert (row.vote, row.comment, row.user_name) == (-1, "out of date \ufffd", "Ada")


async def test_a_channel_setting_with_nul_and_a_lone_surrogate_is_stored_and_audited(db: Database) -> None:
    store = ChannelConfigStore(db)
    settings, changes = await store.update(
        "discord:G-hostile:C1", set_fields={"system_prompt": "Be\x00 brief \ud800", "approvers": ["U\x001"]},
        actor="discord:U\ud8001")
    assert settings.system_prompt == "Be brief \ufffd" and settings.approvers == ("U1",)
    assert {entry.field for entry in changes} == {"system_prompt", "approvers"}
    assert (await store.get("discord:G-hostile:C1")).system_prompt == "Be brief \ufffd"
    [audited] = [entry for entry in await store.history("discord:G-hostile:C1") if entry.field == "system_prompt"]
    assert (audited.after, audited.changed_by) == ("Be brief \ufffd", "discord:U\ufffd1")


async def test_a_document_with_nul_in_its_title_and_text_is_ingested_and_found(db: Database, tmp_path: Path) -> None:
    # Past the loader's binary sniff, a NUL is text to it: the documents and chunks inserts failed on it.
    docs = tmp_path / "docs"
    docs.mkdir()
    filler = "z" * (BINARY_SNIFF_BYTES + 10)
    (docs / "runbook.md").write_text(f"{filler}\n\n# Deploy\x00 runbook\n\nRollback\x00 with make rollback.\n")
    summary = await ingest(
        db, IngestRequest(source="hostile-docs", exposure="prefetch", targets=[str(docs)]),
        embedder=None,
    )
    assert (summary.added, summary.skipped) == (1, ())
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT d.title FROM documents d JOIN sources s ON s.id = d.source_id"
                                    " WHERE s.name = 'hostile-docs'")
        assert await cursor.fetchall() == [("Deploy runbook",)]
    found = await PgRetriever(db, None).search("rollback", limit=3)
    assert any("Rollback with make rollback." in hit.text for hit in found)


async def test_any_journaled_api_event_with_nul_or_a_lone_surrogate_is_stored(db: Database) -> None:
    import uuid

    from core.api_access import JournalEvent
    from core.store.event_journal import EventJournal

    # Whatever event carries outside text (a tool's arguments, a page title), the journal's one write keeps it.
    journal = EventJournal(db)
    stream = uuid.uuid4()
    await journal.append(stream, 7, [JournalEvent(seq=1, event="anything", data={"t\x00": ["a\x00b", "c\ud800"]})])
    [back] = await journal.after(stream, 7, 0)
    assert back.data == {"t": ["ab", "c\ufffd"]}
