"""Citations over the API (issue 21, item 10): a `[9]` that names no source is dropped from /v1 (whole and streamed)
and from /api/answer's final_answer, exactly as the chats drop it; /v1 lists the cited sources as `sources`."""

from __future__ import annotations

import random
from pathlib import Path

import aiohttp
import openai
import pytest

from core.citations import HeldCitations, cite
from core.events import SourceItem
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.search import PgRetriever
from core.store.db import Database
from tests.adapters.api.harness import auth, serve_api
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls

ANSWER = "Deploys need two reviewers [2], [9] and a green build on main [1][4]."
CLEANED = "Deploys need two reviewers [2] and a green build on main [1][4]."


@pytest.fixture
async def handbook(db: Database, tmp_path: Path) -> PgRetriever:
    """Six deploy documents, found by words (no embeddings): the prompt numbers them 1 to 6."""
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
    docs = tmp_path / "docs"
    docs.mkdir()
    for n, topic in enumerate(["reviewers", "green builds", "freeze weeks", "rollbacks", "hotfixes", "flags"], 1):
        (docs / f"deploy {n}.md").write_text(f"# Deploy {topic}\n\nA deploy rule about {topic}: rule number {n}.\n")
    await ingest(db, IngestRequest(source="handbook", exposure="prefetch", targets=[str(docs)]), embedder=None)
    return PgRetriever(db, None)


async def test_v1_drops_a_citation_of_no_source_whole_and_streamed_and_lists_the_cited(
    db: Database, handbook: PgRetriever, openai_emulator: OpenAIEmulator
) -> None:
    openai_emulator.script_fn(lambda body: Text(ANSWER, chunk_chars=3))
    async with serve_api(db, openai_emulator.base_url, retriever=handbook) as api:
        _, secret = await api.keys.create("v1 citations")
        client = openai.AsyncOpenAI(base_url=api.v1, api_key=secret, max_retries=0)
        question = [{"role": "user", "content": "what are the deploy rules?"}]
        whole = await client.chat.completions.create(model="classic", messages=question)  # type: ignore[arg-type]
        assert whole.choices[0].message.content == CLEANED
        cited = (whole.model_extra or {})["sources"]
        assert [source["n"] for source in cited] == [1, 2, 4] and all(source["title"] for source in cited)

        stream = await client.chat.completions.create(model="classic", messages=question, stream=True)  # type: ignore[arg-type]
        parts, streamed_sources = [], None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
            if (chunk.model_extra or {}).get("sources") is not None:
                streamed_sources = chunk.model_extra["sources"]  # type: ignore[index]
        assert "".join(parts) == CLEANED and "[9]" not in "".join(parts)
        # The text before the first citation streamed as it came; from there it waited for the sources.
        assert len(parts) >= 3 and "".join(parts[:-1]) == "Deploys need two reviewers"
        assert [source["n"] for source in streamed_sources or []] == [1, 2, 4]
        await client.close()


async def test_api_answer_final_answer_drops_a_citation_of_no_source(
    db: Database, handbook: PgRetriever, openai_emulator: OpenAIEmulator
) -> None:
    openai_emulator.script(ToolCalls([Call("calculator", '{"expression": "2+2"}', id="c1")], text="Checking [7]. "),
                           Text(ANSWER))
    async with serve_api(db, openai_emulator.base_url, retriever=handbook) as api, aiohttp.ClientSession() as http:
        _, secret = await api.keys.create("answer citations")
        async with http.post(f"{api.url}/api/answer", json={"question": "what are the deploy rules?"},
                             headers=auth(secret)) as response:
            assert response.status == 200, await response.text()
            body = await response.json()
    assert body["final_answer"] == CLEANED
    assert body["answer"] == "Checking. " + CLEANED


@pytest.mark.parametrize("text", [
    ANSWER, "foo, [9] and [1]", "see ([9]) here [1, 9].", "code `a[0]` and [2]", "[^9] first", "x [\n9] y", "no cites",
])
def test_held_citations_streamed_in_any_pieces_give_what_cite_gives_the_whole(text: str) -> None:
    sources = [SourceItem(title="one", uri="https://example.org/1", text="t")]
    rng = random.Random(text)
    for _ in range(50):
        held, out, start = HeldCitations(), [], 0
        while start < len(text):
            size = rng.randint(1, 5)
            out.append(held.add(text[start:start + size]))
            start += size
        out.append(held.finish(sources))
        assert "".join(out) == cite(text, sources).text
