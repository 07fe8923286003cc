"""DISCORD_*: Discord's settings group — the bot token, where Discord is, which guilds, the request budgets and shards."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from core.config import CommaList
from core.platform_settings import PlatformDefaults, PlatformSettings
from core.setting_checks import HTTP_SCHEMES, WEBSOCKET_SCHEMES, optional_url, split_commas


class DiscordSettings(PlatformSettings):
    """Read as DISCORD_<FIELD>: DISCORD_TOKEN, DISCORD_GUILD_IDS, …"""

    model_config = SettingsConfigDict(env_prefix="DISCORD_")
    platform: ClassVar[str] = "discord"
    hints: ClassVar[dict[str, str]] = {
        "DISCORD_API_BASE": "Discord's API base URL, e.g. https://discord.com/api/v10, or leave it unset",
        "DISCORD_GATEWAY_URL": "a wss:// gateway URL, or leave it unset to use Discord's",
    }

    token: str | None = Field(default=None, repr=False)
    api_base: str | None = None
    gateway_url: str | None = None
    guild_ids: CommaList = ()
    # Without the privileged intent the bot reads only mentions; with it, follow-ups in its threads too.
    message_content_intent: bool = False
    channel_budget_per_5s: int = Field(default=4, ge=1)
    global_requests_per_s: int = Field(default=50, ge=1)  # Discord's documented per-bot limit
    # Unset: one gateway session gets every guild. Set: this process runs the shards DISCORD_SHARD_IDS names
    # ("0-3,7"), or, without it, the ones it claims by lease in Postgres (adapters/discord/shards.py).
    shard_count: int | None = Field(default=None, ge=1)
    shard_ids: CommaList = ()

    @field_validator("guild_ids", "shard_ids", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        return split_commas(value)

    @field_validator("api_base", mode="after")
    @classmethod
    def _check_api_base(cls, value: str | None) -> str | None:
        return optional_url(value, schemes=HTTP_SCHEMES)

    @field_validator("gateway_url", mode="after")
    @classmethod
    def _check_gateway_url(cls, value: str | None) -> str | None:
        return optional_url(value, schemes=WEBSOCKET_SCHEMES)

    @property
    def configured(self) -> bool:
        return bool(self.token)

    def defaults(self) -> PlatformDefaults:
        return PlatformDefaults(
            followups_need_mention=not self.message_content_intent,
            cannot_read_every_message="" if self.message_content_intent else (
                "the Message Content intent is off: turn it on for the bot in Discord's Developer Portal and set "
                "DISCORD_MESSAGE_CONTENT_INTENT=true"),
        )
