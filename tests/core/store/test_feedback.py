"""👍/👎 on turns: one vote per person per turn (a second click changes it), a 👎's comment, and the export since a moment."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from core.requests import ConversationKey
from core.store.conversations import ConversationStore, NewMessage
from core.store.db import Database
from core.store.feedback import FeedbackStore

SOURCE = {"title": "Deploy guide", "uri": "https://docs.example.com/deploy", "text": "…", "source": "docs"}


async def stored_turn(db: Database, question: str, answer: str, *, sources: list[dict[str, str]] | None = None) -> str:
    conversations = ConversationStore(db)
    conversation = await conversations.get_or_create(
        ConversationKey(platform="slack", workspace="T1", channel="C-feedback", thread=uuid.uuid4().hex)
    )
    turn = uuid.uuid4()
    await conversations.append(conversation, turn, [
        NewMessage(role="user", content=question),
        NewMessage(role="assistant", content=answer, sources=sources),
    ])
    return str(turn)


async def voted_at(db: Database, turn_id: str, user_id: str, when: datetime) -> None:
    async with db.connection() as conn:
        await conn.execute("UPDATE feedback SET updated_at = %s WHERE turn_id = %s AND user_id = %s",
                           (when, uuid.UUID(turn_id), user_id))


async def test_one_vote_per_person_per_turn_changeable_with_a_comment_only_while_down(db: Database) -> None:
    store = FeedbackStore(db)
    turn = await stored_turn(db, "How do I deploy?", "Run make deploy [1].", sources=[SOURCE])

    assert await store.vote(turn, user_id="U1", user_name="ada", platform="slack", up=True)
    assert await store.vote(turn, user_id="U2", user_name="bob", platform="slack", up=False)
    assert await store.comment(turn, user_id="U2", user_name="bob", platform="slack", text="  out of date \n")
    # Ada changes her mind: still one row for her, now down.
    assert await store.vote(turn, user_id="U1", user_name="ada", platform="slack", up=False)

    rows = {row.user_id: row for row in await store.export()}
    assert set(rows) == {"U1", "U2"}
    assert (rows["U1"].vote, rows["U1"].comment) == (-1, "")
    assert (rows["U2"].vote, rows["U2"].comment, rows["U2"].user_name) == (-1, "out of date", "bob")
    bob = rows["U2"]
    assert (bob.question, bob.answer, bob.turn_id, bob.platform) == ("How do I deploy?", "Run make deploy [1].", turn, "slack")
    assert bob.sources == [SOURCE] and bob.at.tzinfo is not None

    # A repeated 👎 keeps the reason; a 👍 drops it (a reason says why it was down).
    assert await store.vote(turn, user_id="U2", user_name="bob", platform="slack", up=False)
    assert [r.comment for r in await store.export() if r.user_id == "U2"] == ["out of date"]
    assert await store.vote(turn, user_id="U2", user_name="bob", platform="slack", up=True)
    assert [(r.vote, r.comment) for r in await store.export() if r.user_id == "U2"] == [(1, "")]
    # A comment on a vote never given makes it a 👎 with that reason.
    assert await store.comment(turn, user_id="U3", user_name="cy", platform="discord", text="wrong team")
    assert [(r.vote, r.comment, r.platform) for r in await store.export() if r.user_id == "U3"] == [(-1, "wrong team", "discord")]


async def test_an_id_that_names_no_turn_is_refused(db: Database) -> None:
    store = FeedbackStore(db)
    for turn in ("not-a-uuid", str(uuid.uuid4())):
        assert not await store.vote(turn, user_id="U1", user_name="ada", platform="slack", up=True)
        assert not await store.comment(turn, user_id="U1", user_name="ada", platform="slack", text="why")
    assert [r for r in await store.export() if r.user_id == "U1" and r.turn_id in ("not-a-uuid",)] == []


async def test_export_since_a_moment_oldest_first(db: Database) -> None:
    store = FeedbackStore(db)
    old, new = await stored_turn(db, "old question", "old answer"), await stored_turn(db, "new question", "new answer")
    await store.vote(old, user_id="U9", user_name="ada", platform="slack", up=True)
    await store.vote(new, user_id="U9", user_name="ada", platform="discord", up=False)
    now = datetime.now(timezone.utc)
    await voted_at(db, old, "U9", now - timedelta(days=10))
    await voted_at(db, new, "U9", now - timedelta(hours=1))

    mine = [r for r in await store.export() if r.user_id == "U9"]
    assert [r.question for r in mine] == ["old question", "new question"]
    recent = [r for r in await store.export(since=now - timedelta(days=1)) if r.user_id == "U9"]
    assert [(r.question, r.answer, r.vote, r.sources) for r in recent] == [("new question", "new answer", -1, [])]
