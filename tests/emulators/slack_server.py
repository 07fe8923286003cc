"""Import point for the Slack emulator (the implementation lives in tests/emulators/slack/)."""

from __future__ import annotations

from tests.emulators.slack import *  # noqa: F403
from tests.emulators.slack import __all__  # noqa: F401
