""".env.example lists every setting once, with a comment, and the values it shows are the real defaults."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic.fields import FieldInfo

from bot.platforms import PLATFORMS
from core.config import Settings
from core.platform_settings import PlatformSettings

EXAMPLE = Path(__file__).resolve().parents[1] / ".env.example"
SETTING = re.compile(r"^# ([A-Z][A-Z0-9_]*)=(.*)$")


def _settings_lines() -> list[tuple[int, str, str]]:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    return [(number, match[1], match[2]) for number, line in enumerate(lines) if (match := SETTING.match(line))]


def test_every_setting_is_listed_once_with_a_comment_above_it() -> None:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    listed = [name for _, name, _ in _settings_lines()]
    expected = {name.upper() for name in Settings.model_fields} | {
        name for platform in PLATFORMS for name in platform.settings.variables()
    }
    assert sorted(set(listed)) == sorted(expected), f"missing {expected - set(listed)}, unknown {set(listed) - expected}"
    assert len(listed) == len(set(listed))
    for number, name, _ in _settings_lines():
        comment = lines[number - 1]
        assert comment.startswith("# ") and not SETTING.match(comment), f"{name} has no comment of its own"


def test_uncommenting_every_line_changes_nothing(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{name}={value}\n" for _, name, value in _settings_lines() if value))
    assert Settings(_env_file=env_file).model_dump() == Settings(_env_file=None).model_dump()
    for platform in PLATFORMS:
        read = Settings(_env_file=env_file).platform_settings(platform.settings)
        assert read.model_dump() == Settings(_env_file=None).platform_settings(platform.settings).model_dump()


# Values the generic rule below cannot make up: URLs, JSON, a file that must exist.
SAMPLES = {
    "DATABASE_URL": "postgresql://app@db.example:5432/app",
    "SQL_QUERY_DSN": "postgresql://reader@db.example/shop",
    "LLM_BASE_URL": "https://llm.example/v1",
    "EMBEDDING_BASE_URL": "https://embeddings.example/v1",
    "SLACK_API_URL": "https://slack.example/api/",
    "SLACK_REDIRECT_URI": "https://bot.example/slack/oauth_redirect",
    "DISCORD_API_BASE": "https://discord.example/api/v10",
    "DISCORD_GATEWAY_URL": "wss://gateway.example",
    "LLM_MODEL_OVERRIDES": '{"context_limit": 32000}',
    "TOOL_APPROVAL_OVERRIDES": '{"create_reminder": false}',
    "TOOL_APPROVAL_POLICY": '{"calculator": "always"}',
    "MCP_SERVERS": '{"docs": {"command": "docs-server"}}',
    "MCP_SAFE_TOOLS": '["docs__search"]',
    "READ_URL_ALLOWED_NETWORKS": "10.1.0.0/16",
    "INGEST_ALLOWED_NETWORKS": "10.2.0.0/16",
}


def _owner(name: str) -> tuple[type[Settings] | type[PlatformSettings], str]:
    """The model that reads the variable, and its field."""
    for platform in PLATFORMS:
        if name in platform.settings.variables():
            return platform.settings, name.lower().removeprefix(platform.settings.prefix())
    return Settings, name.lower()


def _sample(name: str, info: FieldInfo, tmp_path: Path) -> str:
    """A valid value other than the default, made up from the field's type and bounds."""
    if name in SAMPLES:
        return SAMPLES[name]
    if name == "SYSTEM_PROMPT_FILE":
        (tmp_path / "prompt.txt").write_text("Be brief.")
        return str(tmp_path / "prompt.txt")
    default = info.default
    if typing.get_origin(info.annotation) is typing.Literal:
        return next(str(value) for value in typing.get_args(info.annotation) if value != default)
    kinds = {arg for arg in typing.get_args(info.annotation) if arg is not type(None)} or {info.annotation}
    if bool in kinds:
        return "false" if default else "true"
    if int in kinds:
        return str((default or 1) + 1)
    if float in kinds:
        return str(default / 2 if default else 1.0)
    if Path in kinds:
        return str(tmp_path / "elsewhere")
    if typing.get_origin(info.annotation) is tuple or any(typing.get_origin(kind) is tuple for kind in kinds):
        return "one, two"
    return "sample-value"


@pytest.mark.parametrize("name", [name for _, name, _ in _settings_lines()])
def test_each_documented_variable_still_sets_its_setting(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every name in .env.example, set in the environment, changes what the settings read (platform settings
    live in their platform's group since issue 23; the names stayed)."""
    model, field = _owner(name)
    info = model.model_fields[field]
    before = Settings(_env_file=None)
    monkeypatch.setenv(name, _sample(name, info, tmp_path))
    after = Settings(_env_file=None)

    def read(settings: Settings) -> Any:
        return getattr(settings if model is Settings else settings.platform_settings(model), field)  # type: ignore[arg-type]

    assert read(after) != read(before), f"{name} did not change {model.__name__}.{field}"
