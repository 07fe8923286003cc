"""`relaybot doctor` against the emulators: healthy, a refused Slack or Discord token, an incomplete Slack setup, URLs with credentials."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bot.doctor import platform_line, run_checks
from core.config import Settings
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator
from tests.emulators.slack import SlackEmulator


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def healthy(
    database_url: str,
    openai_emulator: OpenAIEmulator,
    slack_emulator: SlackEmulator,
    discord_emulator: DiscordEmulator,
    tmp_path: Path,
) -> dict[str, object]:
    """Settings under which every part answers: the test database and all three emulators."""
    return dict(
        _env_file=None,
        database_url=database_url,
        data_dir=tmp_path,
        llm_base_url=openai_emulator.base_url,
        embedding_provider="none",
        slack_bot_token=slack_emulator.bot_token,
        slack_app_token="xapp-1-doctor",
        slack_api_url=slack_emulator.api_url,
        discord_token=discord_emulator.token,
        discord_api_base=discord_emulator.api_base,
    )


async def _doctor(capsys: pytest.CaptureFixture[str], **values: object) -> tuple[int, dict[str, str]]:
    code = await run_checks(Settings(**values))  # type: ignore[arg-type]
    out = capsys.readouterr().out
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    assert list(lines) == ["settings", "database", "llm", "embeddings", "learning", "slack", "discord"], out
    return code, lines


async def test_every_part_healthy_exits_0(healthy: dict[str, object], capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = await _doctor(capsys, **healthy)
    assert code == 0, lines
    assert lines["database"].startswith("ok — Postgres at postgresql://***@") and "migrations applied" in lines["database"]
    assert lines["llm"].startswith("ok — ")
    assert lines["learning"] == "none chosen (`relaybot sources add-channel`)"
    assert lines["slack"].startswith("ok — bot ") and "Socket Mode" in lines["slack"]
    assert lines["discord"].startswith("ok — logged in as relaybot")


async def test_refused_slack_token_fails(healthy: dict[str, object], capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = await _doctor(capsys, **{**healthy, "slack_bot_token": "xoxb-refused-token"})
    assert code == 1
    assert lines["slack"].startswith("FAILED — ") and "invalid_auth" in lines["slack"]
    assert lines["discord"].startswith("ok — ")


async def test_refused_discord_token_fails(healthy: dict[str, object], capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = await _doctor(capsys, **{**healthy, "discord_token": "refused-discord-token"})
    assert code == 1
    assert lines["discord"].startswith("FAILED — ") and "401" in lines["discord"]
    assert lines["slack"].startswith("ok — ")


async def test_slack_without_app_token_or_signing_secret_fails(
    healthy: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    # `relaybot run` refuses this setup, so doctor must not call it ok even though the token works.
    code, lines = await _doctor(capsys, **{**healthy, "slack_app_token": None})
    assert code == 1
    assert lines["slack"].startswith("FAILED — set SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode)")


async def test_platforms_not_configured_are_fine(healthy: dict[str, object], capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = await _doctor(capsys, **{**healthy, "slack_bot_token": None, "discord_token": None})
    assert code == 0
    assert lines["slack"].startswith("not configured") and lines["discord"].startswith("not configured")


async def test_no_line_shows_a_credential(
    healthy: dict[str, object], openai_emulator: OpenAIEmulator, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _closed_port()
    database_url = str(healthy["database_url"]).replace("postgres:@", "postgres:db-pw-SECRET@") + "&sslpassword=ssl-pw-SECRET"
    code, lines = await _doctor(
        capsys,
        **{
            **healthy,
            "database_url": database_url,
            "llm_base_url": openai_emulator.base_url.replace("http://", "http://llm-user:llm-url-SECRET@") + "?api_key=llm-qs-SECRET",
            "embedding_provider": "openai",
            "embedding_model": "text-embedding-3-small",
            "embedding_base_url": f"http://emb-user:emb-url-SECRET@127.0.0.1:{port}/v1",
            "slack_bot_token": "xoxb-slack-token-SECRET",
            "slack_api_url": f"http://slack-user:slack-url-SECRET@127.0.0.1:{port}/api/?token=slack-qs-SECRET",
            "discord_token": "discord-token-SECRET",
            "discord_api_base": f"http://127.0.0.1:{port}/api/v10?token=dc-qs-SECRET",
        },
    )
    shown = "\n".join(f"{name}: {line}" for name, line in lines.items())
    assert code == 1  # Slack and Discord cannot be reached
    assert "SECRET" not in shown, shown
    assert lines["database"].startswith("ok — Postgres at postgresql://***@/") and "sslpassword=***" in lines["database"]
    assert "at http://***@127.0.0.1:" in lines["llm"] and "api_key=***" in lines["llm"]
    assert f"at http://***@127.0.0.1:{port}/v1" in lines["embeddings"]
    assert lines["slack"].startswith(f"FAILED — cannot reach http://***@127.0.0.1:{port}/api/?token=*** (")
    assert lines["discord"].startswith(f"FAILED — cannot reach http://127.0.0.1:{port}/api/v10?token=*** (")


@pytest.mark.parametrize(
    ("line", "ok"),
    [
        ("ok — bot relaybot (UB1) in Emulator (T1), Socket Mode", True),
        ("not configured (DISCORD_TOKEN is not set)", True),
        ("FAILED — the bot token was refused (invalid_auth)", False),
        ("okay, I guess", False),
        ("", False),
    ],
)
def test_platform_lines_pass_only_when_plainly_ok(line: str, ok: bool) -> None:
    assert platform_line(line) == (ok, line)
