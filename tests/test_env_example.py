""".env.example lists every setting once, with a comment, and the values it shows are the real defaults."""

from __future__ import annotations

import re
from pathlib import Path

from core.config import Settings

EXAMPLE = Path(__file__).resolve().parents[1] / ".env.example"
SETTING = re.compile(r"^# ([A-Z][A-Z0-9_]*)=(.*)$")


def _settings_lines() -> list[tuple[int, str, str]]:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    return [(number, match[1], match[2]) for number, line in enumerate(lines) if (match := SETTING.match(line))]


def test_every_setting_is_listed_once_with_a_comment_above_it() -> None:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    listed = [name for _, name, _ in _settings_lines()]
    expected = {name.upper() for name in Settings.model_fields}
    assert sorted(set(listed)) == sorted(expected), f"missing {expected - set(listed)}, unknown {set(listed) - expected}"
    assert len(listed) == len(set(listed))
    for number, name, _ in _settings_lines():
        comment = lines[number - 1]
        assert comment.startswith("# ") and not SETTING.match(comment), f"{name} has no comment of its own"


def test_uncommenting_every_line_changes_nothing(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{name}={value}\n" for _, name, value in _settings_lines() if value))
    assert Settings(_env_file=env_file).model_dump() == Settings(_env_file=None).model_dump()
