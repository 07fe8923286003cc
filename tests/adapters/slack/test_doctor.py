"""`relaybot doctor`'s Slack line against the Slack emulator: a good token, a refused one, none, no Slack at all."""

from __future__ import annotations

from core.config import Settings
from adapters.slack import check_slack
from tests.emulators.slack import SlackEmulator


async def test_doctor_checks_the_slack_token(slack_emulator: SlackEmulator) -> None:
    def settings(**values: object) -> Settings:
        return Settings(_env_file=None, slack_api_url=slack_emulator.api_url, **values)  # type: ignore[arg-type]

    ok = await check_slack(settings(slack_bot_token=slack_emulator.bot_token, slack_app_token="xapp-1"))
    refused = await check_slack(settings(slack_bot_token="xoxb-wrong", slack_signing_secret="s"))
    missing = await check_slack(settings(slack_bot_token=None))
    unreachable = await check_slack(
        Settings(_env_file=None, slack_bot_token="xoxb-1", slack_app_token="xapp-1", slack_api_url="http://127.0.0.1:9/api/")
    )
    assert ok.startswith("ok — ") and "Socket Mode" in ok
    assert refused.startswith("FAILED — ") and "invalid_auth" in refused
    assert missing.startswith("not configured")
    assert unreachable.startswith("FAILED — cannot reach")
    assert all("\n" not in line and "xoxb" not in line for line in (ok, refused, missing, unreachable))
