"""Settings from the environment and `.env`: one object, built once and passed down."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

CommaList = Annotated[tuple[str, ...], NoDecode]

AgentType = Literal["classic", "react", "agentic", "research"]
EmbeddingProviderName = Literal["local", "openai", "none"]

# What to tell a user for each setting when its value is missing or malformed.
HINTS: dict[str, str] = {
    "DATABASE_URL": "a postgresql:// URL, or leave it unset to use the embedded database",
    "LLM_BASE_URL": "the base URL of an OpenAI-compatible API, e.g. https://api.openai.com/v1",
    "LLM_REQUEST_TIMEOUT_S": "a number of seconds, e.g. 60",
    "LLM_IDLE_TIMEOUT_S": "a number of seconds, e.g. 30",
    "LLM_MODEL_OVERRIDES": 'a JSON object, e.g. {"context_limit": 32000, "supports_vision": false}',
    "HTTP_PORT": "a TCP port number between 0 and 65535",
    "EMBEDDING_PROVIDER": "one of local, openai, none",
    "AGENT_TYPE": "one of classic, react, agentic, research",
    "TOOL_APPROVAL_OVERRIDES": 'a JSON object of tool name to true/false, e.g. {"create_reminder": false}',
    "DIRECT_MESSAGES": "one of members, open, closed",
}

# Who may DM the bot: `members` of an allowed workspace/guild (everyone when no allowlist is set),
# anyone (`open`), or nobody (`closed`). One rule for every surface that is a DM.
DirectMessagePolicy = Literal["members", "open", "closed"]


class SettingsError(Exception):
    """A setting is missing or malformed; the message is one sentence naming the variable."""


class Settings(BaseSettings):
    """Everything relaybot reads from its environment."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    # Storage
    database_url: str | None = Field(default=None, repr=False)  # may hold a password
    data_dir: Path = Path(".relaybot")

    # Language model
    llm_base_url: str = "https://api.openai.com/v1"
    llm_api_key: str = Field(default="", repr=False)
    llm_model: str = "gpt-4o-mini"
    llm_upstream_model: str | None = None
    llm_model_overrides: Annotated[dict[str, Any], NoDecode] = Field(default_factory=dict)
    llm_request_timeout_s: float = Field(default=60.0, gt=0)
    llm_idle_timeout_s: float = Field(default=30.0, gt=0)
    llm_temperature: float | None = None
    llm_max_tokens: int = 0
    agent_model: str | None = None

    # Agent
    agent_type: AgentType = "classic"
    system_prompt_file: Path | None = None
    agent_loop_limit: int = Field(default=8, ge=1)
    approvers: CommaList = ()
    approver_roles: CommaList = ()
    approval_expiry_s: float = Field(default=24 * 3600, gt=0)
    tool_approval_overrides: Annotated[dict[str, bool], NoDecode] = Field(default_factory=dict)
    retrieval_chunks: int = Field(default=6, ge=0)
    retrieval_doc_tokens: int = Field(default=2000, ge=0)

    # Embeddings
    embedding_provider: EmbeddingProviderName = "local"
    embedding_model: str | None = None
    embedding_base_url: str | None = None
    embedding_api_key: str | None = Field(default=None, repr=False)
    embedding_dimension: int | None = None

    # Ingestion
    ingest_allow_private: bool = False
    ingest_allowed_networks: CommaList = ()
    ingest_max_url_bytes: int = 5_000_000

    # Slack
    slack_bot_token: str | None = Field(default=None, repr=False)
    slack_app_token: str | None = Field(default=None, repr=False)
    slack_signing_secret: str | None = Field(default=None, repr=False)
    slack_api_url: str = "https://slack.com/api/"
    slack_team_ids: CommaList = ()
    slack_thread_followups: bool = True
    slack_rate_share: float = Field(default=1.0, gt=0, le=1)

    # Discord
    discord_token: str | None = Field(default=None, repr=False)
    discord_api_base: str | None = None
    discord_gateway_url: str | None = None
    discord_guild_ids: CommaList = ()
    discord_message_content_intent: bool = False
    discord_channel_budget_per_5s: int = Field(default=4, ge=1)

    # Direct messages (Slack DMs, Discord DMs)
    direct_messages: DirectMessagePolicy = "members"

    # HTTP server
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=8080, ge=0, le=65535)

    # Shutdown
    shutdown_grace_s: float = Field(default=10.0, ge=0)

    @field_validator(
        "approvers", "approver_roles", "slack_team_ids", "discord_guild_ids", "ingest_allowed_networks", mode="before"
    )
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("llm_model_overrides", "tool_approval_overrides", mode="before")
    @classmethod
    def _parse_json_object(cls, value: object) -> object:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else {}
        return value


def load_settings(**overrides: Any) -> Settings:
    """Build Settings, turning validation errors into one sentence per bad variable."""
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise SettingsError(describe_validation_error(error)) from None


def describe_validation_error(error: ValidationError) -> str:
    sentences = []
    for problem in error.errors():
        variable = str(problem["loc"][0]).upper() if problem["loc"] else "a setting"
        hint = HINTS.get(variable, "a valid value")
        sentences.append(f"The setting {variable} is invalid ({problem['msg']}); set it to {hint}.")
    return " ".join(sentences)
