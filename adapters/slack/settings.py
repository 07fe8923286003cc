"""SLACK_*: Slack's settings group — the app's credentials, where its API is, and how it answers and paces itself."""

from __future__ import annotations

from typing import ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from core.config import CommaList
from core.platform_settings import PlatformDefaults, PlatformSettings
from core.setting_checks import HTTP_SCHEMES, optional_url, split_commas


class SlackSettings(PlatformSettings):
    """Read as SLACK_<FIELD>: SLACK_BOT_TOKEN, SLACK_TEAM_IDS, …"""

    model_config = SettingsConfigDict(env_prefix="SLACK_")
    platform: ClassVar[str] = "slack"
    hints: ClassVar[dict[str, str]] = {
        "SLACK_API_URL": "Slack's Web API base URL, e.g. https://slack.com/api/",
        "SLACK_REDIRECT_URI": "the public https URL of /slack/oauth_redirect, e.g. https://bot.example.com/slack/oauth_redirect",
    }

    bot_token: str | None = Field(default=None, repr=False)
    app_token: str | None = Field(default=None, repr=False)
    signing_secret: str | None = Field(default=None, repr=False)
    # "Add to Slack" for several workspaces (adapters/slack/oauth.py): both set turn it on (SECRET_KEY required).
    client_id: str | None = None
    client_secret: str | None = Field(default=None, repr=False)
    # Where Slack sends the installer back: the public https URL of /slack/oauth_redirect.
    redirect_uri: str | None = None
    api_url: str = "https://slack.com/api/"
    team_ids: CommaList = ()
    thread_followups: bool = True
    rate_share: float = Field(default=1.0, gt=0, le=1)
    # Slack documents a workspace-wide chat.postMessage limit without a number: set it when known;
    # either way the bot learns it from 429s.
    workspace_posts_per_minute: int | None = Field(default=None, ge=1)
    # assistant.threads.setStatus has "special" limits, documented without a number: the status budget (calls a
    # minute per workspace; a burst of ten seconds' calls), slowed by 429s either way.
    status_per_minute: int = Field(default=600, ge=1)
    # conversations.replies / history limits: "internal" (Tier 3, ~50 a minute) or "limited" (1 a minute,
    # 15 messages a page: commercially distributed apps outside the Marketplace). Sizes the read budget.
    history_tier: Literal["internal", "limited"] = "internal"
    # Slack's native streaming (chat.startStream…): "auto" streams an answer natively when the workspace
    # offers it and a start is within its budget, else with post+update; "off" always posts and updates.
    native_streaming: Literal["auto", "off"] = "auto"
    # Slack's AI-app pane (Agents & AI Apps): suggested prompts, thread titles, "is thinking…" status.
    assistant: bool = True

    @field_validator("team_ids", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        return split_commas(value)

    @field_validator("api_url", mode="after")
    @classmethod
    def _check_api_url(cls, value: str) -> str | None:
        return optional_url(value, schemes=HTTP_SCHEMES)

    @field_validator("redirect_uri", mode="after")
    @classmethod
    def _check_redirect_uri(cls, value: str | None) -> str | None:
        checked = optional_url(value, schemes=HTTP_SCHEMES)
        parts = urlsplit(checked or "")
        if checked and parts.scheme != "https" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("Slack sends installers back only to an https URL")
        return checked

    @property
    def configured(self) -> bool:
        return bool(self.bot_token) or self.multi_workspace

    @property
    def multi_workspace(self) -> bool:
        """Several workspaces through "Add to Slack": the app's client id and secret are set."""
        return bool(self.client_id and self.client_secret)

    def defaults(self) -> PlatformDefaults:
        # Installed by many teams, none of them owns what the deployment ingested without --team.
        return PlatformDefaults(followups_need_mention=not self.thread_followups,
                                shares_deployment_sources=not self.multi_workspace)
