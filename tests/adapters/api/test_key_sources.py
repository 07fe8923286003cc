"""A key's sources narrow its answers like a channel's, and restricted sources it names are granted to it alone."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from bot.keys_cli import grant_key_sources, revoke_key_grants
from core.api_access import api_key_audience
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.search import PgRetriever
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from tests.adapters.api.harness import auth, serve_api
from tests.emulators.openai_server import OpenAIEmulator, Text

SECRET = "4 million crowns"


async def _documents(db: Database, tmp_path: Path) -> PgRetriever:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
    for name, text in (("finance", f"# Zeppelin budget\n\nThe zeppelin budget is {SECRET}.\n"),
                       ("handbook", "# Zeppelin handbook\n\nQuestions about the zeppelin budget go to finance.\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "doc.md").write_text(text)
        await ingest(db, IngestRequest(source=name, exposure="prefetch", targets=[str(tmp_path / name)]), embedder=None)
    await ChannelConfigStore(db).set_restricted("finance", True, actor="cli:test")
    return PgRetriever(db, None)


async def test_key_sources_scope_answers(db: Database, tmp_path: Path, openai_emulator: OpenAIEmulator) -> None:
    retriever = await _documents(db, tmp_path)
    config = ChannelConfigStore(db)
    async with serve_api(db, openai_emulator.base_url, retriever=retriever) as api, aiohttp.ClientSession() as http:
        finance_key, finance = await api.keys.create("finance", sources=("finance", "handbook"))
        assert await grant_key_sources(config, finance_key, actor="cli:test") == []
        _, anyone = await api.keys.create("anyone")
        _, handbook = await api.keys.create("handbook-only", sources=("handbook",))

        async def ask(secret: str, **extra: object) -> tuple[int, dict]:
            openai_emulator.script(Text("ok"))
            body = {"question": "what is the zeppelin budget?", **extra}
            async with http.post(f"{api.url}/api/answer", json=body, headers=auth(secret)) as response:
                return response.status, await response.json()

        def prompt() -> str:
            return json.dumps(openai_emulator.chat_requests[-1]["messages"])

        assert (await ask(finance))[0] == 200 and SECRET in prompt() and "Zeppelin handbook" in prompt()
        # The request narrows within the key's sources.
        assert (await ask(finance, sources=["handbook"]))[0] == 200
        assert SECRET not in prompt() and "Zeppelin handbook" in prompt()
        # A key with no grant never sees the restricted source, asked for or not.
        assert (await ask(anyone))[0] == 200 and SECRET not in prompt() and "Zeppelin handbook" in prompt()
        assert (await ask(anyone, sources=["finance"]))[0] == 200 and SECRET not in prompt()
        status, refused = await ask(handbook, sources=["finance"])
        assert status == 403 and refused["error"]["type"] == "sources_not_allowed"
        assert (await ask(handbook))[0] == 200 and SECRET not in prompt()
        # Revoking the key takes its grants back.
        assert await config.granted_to(api_key_audience(finance_key.id)) == ["finance", "handbook"]
        await revoke_key_grants(config, finance_key, actor="cli:test")
        assert await config.granted_to(api_key_audience(finance_key.id)) == []
