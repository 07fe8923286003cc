"""Settings: comma lists, JSON objects, one-sentence errors, malformed URLs, and secrets kept out of what is printed."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bot.platforms  # noqa: F401  (registers the platforms' settings groups, as every entry point does)
from core.config import Settings, SettingsError, load_settings
from core.redact import RedactingFormatter, redact_text, redact_url, url_secrets


def test_lists_and_json_objects_from_text() -> None:
    settings = Settings(_env_file=None, approvers="U1, U2,,", tool_approval_overrides='{"create_reminder": false}')
    assert settings.approvers == ("U1", "U2")
    assert settings.tool_approval_overrides == {"create_reminder": False}


def test_bad_value_is_one_sentence_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_REQUEST_TIMEOUT_S", "soon")
    with pytest.raises(SettingsError, match=r"^The setting LLM_REQUEST_TIMEOUT_S is invalid .*; set it to a number of seconds"):
        load_settings(_env_file=None)


def test_secrets_never_appear_in_repr() -> None:
    settings = Settings(
        _env_file=None,
        llm_api_key="sk-very-secret",
        slack_bot_token="xoxb-very-secret",
        slack_signing_secret="signing-very-secret",
        discord_token="discord-very-secret",
        database_url="postgresql://u:pw-very-secret@db/x",
    )
    assert "very-secret" not in repr(settings) and "very-secret" not in str(settings)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("postgresql+psycopg://app:pw-very-secret@db.internal/app", "its scheme is postgresql+psycopg://"),
        ("not-a-url", "it is not a URL"),
        ("app:pw-very-secret@db.internal/app", "it is not a URL"),
        ("postgresql://app:pw-very-secret@db.internal:54x2/app", "its port is not a number"),
        ("postgresql://app:pw very-secret@db.internal/app", "psycopg cannot read it"),
        ("postgresql://app:pw-very-secret@db.internal/app?not_an_option=1", "psycopg cannot read it"),
    ],
)
def test_malformed_database_url_is_one_sentence_without_the_password(
    monkeypatch: pytest.MonkeyPatch, value: str, reason: str
) -> None:
    monkeypatch.setenv("DATABASE_URL", value)
    with pytest.raises(SettingsError) as caught:
        load_settings(_env_file=None)
    message = str(caught.value)
    assert message.startswith("The setting DATABASE_URL is invalid (") and reason in message
    assert message.count(". ") == 0 and message.endswith(".")
    assert "very-secret" not in message and "Value error" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize("value", ["postgresql://app:pw@db/app", "postgres://db/app?sslmode=require", "postgresql:///app?host=/tmp"])
def test_database_urls_psycopg_reads_are_accepted(value: str) -> None:
    assert Settings(_env_file=None, database_url=f"  {value} ").database_url == value


def test_empty_database_url_means_the_embedded_database() -> None:
    assert Settings(_env_file=None, database_url=" ").database_url is None


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("LLM_BASE_URL", "api.openai.com/v1", "it is not a URL"),
        ("SLACK_API_URL", "ftp://slack.example/api/", "its scheme is ftp://"),
        ("EMBEDDING_BASE_URL", "http://127.0.0.1:port/v1", "its port is not a number"),
        ("DISCORD_API_BASE", "http:///api/v10", "no host name"),
        ("DISCORD_GATEWAY_URL", "https://gateway.example", "not ws:// or wss://"),
    ],
)
def test_malformed_urls_name_their_variable(monkeypatch: pytest.MonkeyPatch, variable: str, value: str, reason: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=rf"^The setting {variable} is invalid \(.*{reason}"):
        load_settings(_env_file=None)


def test_secret_values_cover_tokens_keys_and_url_credentials() -> None:
    settings = Settings(
        _env_file=None,
        llm_api_key="sk-key-secret",
        slack_bot_token="xoxb-token-secret",
        slack_signing_secret="signing-secret",
        discord_token="discord-token-secret",
        database_url="postgresql://app:p%40ss-secret@db/app?sslpassword=ssl-secret",
        llm_base_url="https://user:url-secret@llm.example/v1",
    )
    secrets = settings.secret_values()
    for value in ("sk-key-secret", "xoxb-token-secret", "signing-secret", "discord-token-secret", "p@ss-secret",
                  "p%40ss-secret", "ssl-secret", "url-secret"):
        assert value in secrets
    assert Settings(_env_file=None).secret_values() == ()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:pw@db:5432/app?sslmode=require&sslpassword=x", "postgresql://***@db:5432/app?sslmode=require&sslpassword=***"),
        ("https://sk-in-user@llm.example/v1", "https://***@llm.example/v1"),
        ("http://127.0.0.1:9/api/?token=xoxb-1&Api_Key=k&team=T1", "http://127.0.0.1:9/api/?token=***&Api_Key=***&team=T1"),
        ("https://discord.com/api/v10/users/@me", "https://discord.com/api/v10/users/@me"),
        ("http://u:p@[::1]:8080/x#password=y", "http://***@[::1]:8080/x#password=y"),
        ("host=db password=hunter2 user=app", "host=db password=*** user=app"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_text_masks_slack_and_discord_tokens_it_was_never_given() -> None:
    # Multi-workspace mode holds every installed team's tokens (and their refresh tokens) without them being settings.
    bot, refresh = "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx", "xoxe-1-My0xLTEyMzQ1Njc4OTAtYWJj"
    discord_token = "MTIzNDU2Nzg5MDEyMzQ1Njc4OQ.GaBcDe.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    shown = redact_text(f"refresh {refresh} for {bot} failed; gateway token {discord_token}")
    assert bot not in shown and refresh not in shown and discord_token not in shown
    assert shown == "refresh *** for *** failed; gateway token ***"
    assert redact_text("run 3f2a9c1e.b7 took 1.5 s in #ops-xox") == "run 3f2a9c1e.b7 took 1.5 s in #ops-xox"


def test_redact_text_masks_urls_pairs_and_known_secrets() -> None:
    text = (
        'missing "=" after "postgresql+psycopg://app:pw-1@db/app" in connection info string; '
        "FAILED — http://u:p@127.0.0.1:9/v1?api_key=k-2: refused; token xoxb-3333 sent; "
        "password='two words' and {\"password\": \"x y\"}; pw short-ish: abc"
    )
    shown = redact_text(text, secrets=["xoxb-3333", "abc"])
    assert shown == (
        'missing "=" after "postgresql+psycopg://***@db/app" in connection info string; '
        "FAILED — http://***@127.0.0.1:9/v1?api_key=***: refused; token *** sent; "
        "password=*** and {\"password\": ***}; pw short-ish: abc"
    )
    assert {"p%40ss", "p@ss", "app:p%40ss", "q"} <= set(url_secrets("postgresql://app:p%40ss@db/app?sslpassword=q"))
    assert url_secrets("https://llm.example/v1") == () and url_secrets(None) == ()
    # A database's user is a name, not a credential; an API URL's lone user may be a token.
    assert url_secrets("postgresql://postgres:@/db?host=/tmp") == url_secrets("postgres://postgres@db/x") == ()
    assert url_secrets("https://tok-123456@api.example/") == ("tok-123456",)


def test_redacting_formatter_covers_arguments_and_tracebacks() -> None:
    formatter = RedactingFormatter("%(levelname)s %(message)s")
    formatter.add_secrets(["xoxb-live-token"])
    try:
        raise RuntimeError("cannot reach postgresql://app:pw@db/app with xoxb-live-token")
    except RuntimeError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "failed at %s", ("https://u:p@h/x",), sys.exc_info())
    line = formatter.format(record)
    assert "Traceback" in line and "xoxb-live-token" not in line and "u:p@" not in line and "app:pw" not in line
    assert "https://***@h/x" in line and "postgresql://***@db/app with ***" in line


@pytest.mark.parametrize("value", ['{"context_limit": -5}', '{"context_limit": "big"}', '{"max_output_tokens": 0}',
                                   '{"context_limit": 1e309}', '{"supports_vision": 2}', '{"context_limit": 1.5}'])
def test_a_wrong_model_override_is_one_sentence_at_load(value: str) -> None:
    with pytest.raises(SettingsError, match=r"^The setting LLM_MODEL_OVERRIDES is invalid \((context_limit|max_output_tokens|supports_vision) must be"):
        load_settings(_env_file=None, llm_model_overrides=value)


def test_model_overrides_in_range_are_read_as_numbers_and_flags() -> None:
    settings = Settings(_env_file=None, llm_model_overrides='{"context_limit": 32000.0, "supports_vision": "false"}')
    assert settings.llm_model_overrides == {"context_limit": 32000, "supports_vision": False}


@pytest.mark.parametrize(
    ("variable", "value"),
    [("LLM_REQUEST_TIMEOUT_S", "inf"), ("SHUTDOWN_GRACE_S", "nan"), ("LLM_TEMPERATURE", "-1"), ("LLM_MAX_TOKENS", "-5"),
     ("EMBEDDING_DIMENSION", "0"), ("INGEST_MAX_URL_BYTES", "0"), ("SYSTEM_PROMPT_FILE", "/nonexistent/prompt.md"),
     ("LLM_MODEL", "")],
)
def test_values_that_would_fail_later_are_refused_at_load(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=rf"^The setting {variable} is invalid "):
        load_settings(_env_file=None)


@pytest.mark.parametrize("value", ['{"context_limit": -5}', '{"context_limit": "big"}', '{"context_limit": 0}',
                                   '{"context_limit": 1e309}'])
def test_relaybot_run_with_a_wrong_override_exits_2_before_opening_the_database(tmp_path: Path, value: str) -> None:
    # Nothing listens on port 1: a run that got as far as the database would fail there instead (exit 1).
    env = {key: item for key, item in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(HF_HUB_OFFLINE="1", LLM_MODEL_OVERRIDES=value, DATABASE_URL="postgresql://relaybot@127.0.0.1:1/relaybot",
               DATA_DIR=str(tmp_path / "data"), EMBEDDING_PROVIDER="none")
    result = subprocess.run([sys.executable, "-m", "bot", "run"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("relaybot: The setting LLM_MODEL_OVERRIDES is invalid (context_limit must be")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()
