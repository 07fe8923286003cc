"""The runtime lends tools a reader that reaches the adapters it builds after the engine (read_conversation)."""

from __future__ import annotations

from pathlib import Path

from bot.runtime import Runtime
from core.requests import ConversationKey
from tests.emulators.openai_server import OpenAIEmulator
from tests.emulators.slack import SlackEmulator
from tests.support.engine import test_settings as settings_for


async def test_read_conversation_reads_through_the_slack_adapter_built_after_the_engine(
    database_url: str, openai_emulator: OpenAIEmulator, slack_emulator: SlackEmulator, tmp_path: Path
) -> None:
    slack = slack_emulator
    root = slack.add_user_message("C0000GENRL", "is the deploy done?", "U0000ALICE")
    slack.add_user_message("C0000GENRL", "yes, at noon", "U0000BOB", root)
    settings = settings_for(
        openai_emulator.base_url, database_url=database_url, data_dir=tmp_path, http_port=0,
        slack_bot_token=slack.bot_token, slack_signing_secret=slack.signing_secret, slack_api_url=slack.api_url,
    )
    runtime = Runtime(settings)
    try:
        await runtime.start()
        assert runtime.engine is not None and "read_conversation" in runtime.engine.registry
        key = ConversationKey(platform="slack", workspace=slack.team_id, channel="C0000GENRL", thread=root)
        read = await runtime.readers.read(key, scope="thread", limit=10)
        assert [(m.author, m.text) for m in read] == [("U0000ALICE", "is the deploy done?"), ("U0000BOB", "yes, at noon")]
    finally:
        await runtime.stop()
