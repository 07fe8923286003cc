"""A platform's settings group (PlatformSettings) and its channel defaults; Settings reads every group defined."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from pydantic_settings import BaseSettings, SettingsConfigDict

from core.redact import url_secrets

__all__ = ["PLATFORM_SETTINGS", "Group", "PlatformDefaults", "PlatformSettings", "registered_platform_settings"]


@dataclass(frozen=True, kw_only=True)
class PlatformDefaults:
    """What every channel of a platform runs with until an admin sets otherwise (core/channels.py's last level)."""

    followups_need_mention: bool = True  # a platform that says nothing answers only mentions in threads
    # Why the bot cannot read the text of every message it is sent ("" when it can): respond_to=all is refused then.
    cannot_read_every_message: str = ""
    # Whether its workspaces also search this deployment's own sources (owner ''), beside their team's: true but
    # where the platform serves installed workspaces of many owners (Slack's multi-workspace mode).
    shares_deployment_sources: bool = True


class PlatformSettings(BaseSettings):
    """A platform's settings group: its fields are read from `<env_prefix><FIELD>` (SLACK_BOT_TOKEN), from the
    environment and the same .env as Settings. A subclass names its platform and env_prefix; defining it is
    what registers it (Settings reads every registered group, so a new platform edits nothing here)."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore", allow_inf_nan=False)

    platform: ClassVar[str] = ""  # ConversationKey.platform
    hints: ClassVar[dict[str, str]] = {}  # variable → what to set it to, as HINTS

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if cls.platform:
            PLATFORM_SETTINGS[cls.platform] = cls

    @classmethod
    def prefix(cls) -> str:
        return str(cls.model_config.get("env_prefix", "")).lower()

    @classmethod
    def variables(cls) -> tuple[str, ...]:
        """Every environment variable the group reads."""
        return tuple(f"{cls.prefix()}{name}".upper() for name in cls.model_fields)

    @property
    def configured(self) -> bool:
        """Whether this process serves the platform (its credentials are set)."""
        return False

    def defaults(self) -> PlatformDefaults:
        return PlatformDefaults()

    def secret_values(self) -> tuple[str, ...]:
        """Its secrets (the fields kept out of repr) and any credentials written into its URLs."""
        values: list[str] = []
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if isinstance(value, str) and value:
                values.extend([value] if info.repr is False else url_secrets(value) if "://" in value else [])
        return tuple(values)


PLATFORM_SETTINGS: dict[str, type[PlatformSettings]] = {}
Group = TypeVar("Group", bound=PlatformSettings)


def registered_platform_settings() -> tuple[type[PlatformSettings], ...]:
    return tuple(PLATFORM_SETTINGS.values())
