"""Settings: comma lists, JSON objects, one-sentence errors, and secrets kept out of reprs."""

from __future__ import annotations

import pytest

from core.config import Settings, SettingsError, load_settings


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
