"""The toy chat's entry in a platform table (TOYCHAT): written as a real platform's adapters/<name>/platform.py is."""

from __future__ import annotations

from typing import ClassVar

from pydantic_settings import SettingsConfigDict

from adapters.base import AdapterPorts, PlatformAdapter
from adapters.http.server import HttpServer
from adapters.platform import Platform
from core.config import Settings
from core.platform_settings import PlatformDefaults, PlatformSettings
from core.engine import Engine

NAME = "toychat"


class ToyChatSettings(PlatformSettings):
    """TOYCHAT_URL: where the toy chat server is (unset: the platform is not served)."""

    model_config = SettingsConfigDict(env_prefix="TOYCHAT_")
    platform: ClassVar[str] = NAME

    url: str | None = None
    thread_followups: bool = False

    @property
    def configured(self) -> bool:
        return bool(self.url)

    def defaults(self) -> PlatformDefaults:
        return PlatformDefaults(followups_need_mention=not self.thread_followups)


def build_adapter(*, settings: Settings, engine: Engine, ports: AdapterPorts, http: HttpServer) -> PlatformAdapter:
    from .adapter import ToyChatAdapter

    return ToyChatAdapter(settings=settings.platform_settings(ToyChatSettings), engine=engine, ports=ports)


async def doctor_line(settings: Settings) -> str:
    toy = settings.platform_settings(ToyChatSettings)
    return f"ok — toy chat at {toy.url}" if toy.url else "not configured (set TOYCHAT_URL)"


TOYCHAT = Platform(
    name=NAME, settings=ToyChatSettings, adapter=build_adapter, doctor=doctor_line, workspace_word="SPACE",
    emulator="tests.support.toychat.emulator:ToyChatServer",
)
