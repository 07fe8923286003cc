"""Settings from the environment and `.env`: one object, built once and passed down."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from psycopg import conninfo
from pydantic import Field, PrivateAttr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.platform_settings import PLATFORM_SETTINGS, Group, PlatformDefaults, PlatformSettings, registered_platform_settings
from core.redact import url_secrets
from core.setting_checks import HTTP_SCHEMES, check_database_url, check_model_overrides, optional_url, split_commas

CommaList = Annotated[tuple[str, ...], NoDecode]

AgentType = Literal["classic", "react", "agentic", "research"]
EmbeddingProviderName = Literal["local", "openai", "none"]

# What to tell a user for each setting when its value is missing or malformed.
HINTS: dict[str, str] = {
    "DATABASE_URL": "a postgresql:// URL, or leave it unset to use the embedded database",
    "SQL_QUERY_DSN": "a postgresql:// URL of the database sql_query reads (as a read-only role), or leave it unset",
    "SQL_QUERY_MAX_ROWS": "a number of rows between 1 and 10000, e.g. 100",
    "SQL_QUERY_TIMEOUT_S": "a number of seconds, e.g. 5",
    "SQL_QUERY_MAX_VALUE_BYTES": "a number of bytes between 16 and 1000000, e.g. 1000",
    "SQL_QUERY_MAX_RESULT_BYTES": "a number of bytes between 1000 and 100000000, e.g. 100000",
    "LLM_BASE_URL": "the base URL of an OpenAI-compatible API, e.g. https://api.openai.com/v1",
    "EMBEDDING_BASE_URL": "the base URL of an OpenAI-compatible embeddings API, or leave it unset to use LLM_BASE_URL",
    "LLM_REQUEST_TIMEOUT_S": "a number of seconds, e.g. 60",
    "LLM_IDLE_TIMEOUT_S": "a number of seconds, e.g. 30",
    "LLM_MODEL_OVERRIDES": 'a JSON object, e.g. {"context_limit": 32000, "supports_vision": false}',
    "LLM_MODEL": "the model's name at the provider, e.g. gpt-4o-mini",
    "LLM_TEMPERATURE": "a number between 0 and 2, or leave it unset",
    "LLM_MAX_TOKENS": "a whole number of tokens, or 0 for the model's own limit",
    "USER_REQUESTS_PER_DAY": "a whole number of questions a person may ask per UTC day, or leave it unset",
    "USER_TOKENS_PER_DAY": "a whole number of model tokens a person may use per UTC day, or leave it unset",
    "SYSTEM_PROMPT_FILE": "the path of a readable text file, or leave it unset",
    "EMBEDDING_DIMENSION": "a whole number of dimensions, e.g. 1536, or leave it unset",
    "INGEST_MAX_URL_BYTES": "a number of bytes, e.g. 5000000",
    "HTTP_PORT": "a TCP port number between 0 and 65535",
    "API_ENABLED": "true or false",
    "API_MAX_BODY_BYTES": "a number of bytes of at least 1024, e.g. 1000000",
    "EMBEDDING_PROVIDER": "one of local, openai, none",
    "AGENT_TYPE": "one of classic, react, agentic, research",
    "TOOL_APPROVAL_OVERRIDES": 'a JSON object of tool name to true/false, e.g. {"create_reminder": false}',
    "TOOL_APPROVAL_POLICY": (
        'a JSON object of tool name to "always", "never" or {"when": {argument: value or "/regex/"}}, '
        'e.g. {"deploy": {"when": {"target": "/prod/"}}}'
    ),
    "MCP_SERVERS": (
        'a JSON object of server name to {"command": "...", "args": [...], "env": {...}} (stdio) '
        'or {"url": "https://...", "headers": {...}} (streamable HTTP)'
    ),
    "MCP_SAFE_TOOLS": 'a JSON list of MCP tool names (server__tool) that run without approval, e.g. ["docs__search"]',
    "MCP_CALL_TIMEOUT_S": "a number of seconds, e.g. 30",
    "MCP_TRUST_READ_ONLY_HINT": "true or false",
    "DIRECT_MESSAGES": "one of members, open, closed",
    "STREAM_PLACEHOLDER_AFTER_S": "a number of seconds, e.g. 1 (0 posts the placeholder at once)",
    "READ_CONVERSATION_MAX_TOKENS": "a number of tokens between 100 and 2000, e.g. 1500",
    "LOG_LEVEL": "one of DEBUG, INFO, WARNING, ERROR, CRITICAL",
    "LOG_FORMAT": "one of text, json",
    "READ_URL_ALLOWED_NETWORKS": "comma-separated CIDRs such as 10.1.0.0/16, or leave it unset",
    "SOURCE_SYNC_ENABLED": "true or false",
    "SOURCE_SYNC_CHECK_S": "a number of seconds, e.g. 300",
    "UNINSTALL_DATA": "one of keep, purge",
}

# Who may DM the bot: `members` of an allowed workspace/guild (everyone when no allowlist is set),
# anyone (`open`), or nobody (`closed`). One rule for every surface that is a DM.
DirectMessagePolicy = Literal["members", "open", "closed"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
LogFormat = Literal["text", "json"]


class SettingsError(Exception):
    """A setting is missing or malformed; the message is one sentence naming the variable."""


# Options of BaseSettings that a platform's group is read with too (Settings(_env_file=None) reads no .env at all).
_SHARED_OPTIONS = ("_env_file", "_env_file_encoding")


class Settings(BaseSettings):
    """Everything relaybot reads from its environment."""

    # No setting means infinity or NaN: `inf` seconds or tokens would pass `gt=0` and fail deep inside a run.
    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore", allow_inf_nan=False)

    # Storage
    database_url: str | None = Field(default=None, repr=False)  # may hold a password
    data_dir: Path = Path(".relaybot")
    # On a throw-away-disk host (DYNO set) `relaybot run` refuses the embedded database unless this is true.
    allow_ephemeral_database: bool = False

    # Language model
    llm_base_url: str = "https://api.openai.com/v1"
    llm_api_key: str = Field(default="", repr=False)
    llm_model: str = Field(default="gpt-4o-mini", min_length=1)
    llm_upstream_model: str | None = None
    llm_model_overrides: Annotated[dict[str, Any], NoDecode] = Field(default_factory=dict)
    llm_request_timeout_s: float = Field(default=60.0, gt=0)
    llm_idle_timeout_s: float = Field(default=30.0, gt=0)
    llm_temperature: float | None = Field(default=None, ge=0, le=2)
    llm_max_tokens: int = Field(default=0, ge=0)  # 0: the model's own limit
    agent_model: str | None = None

    # Agent
    agent_type: AgentType = "classic"
    system_prompt_file: Path | None = None
    agent_loop_limit: int = Field(default=8, ge=1)
    approvers: CommaList = ()
    approver_roles: CommaList = ()
    # Who may change a channel's settings from chat (Slack's /relaybot, Discord's /relaybot config) besides
    # Slack's workspace admins and owners and Discord's Manage Server: user ids, Discord role ids.
    channel_admins: CommaList = ()
    channel_admin_roles: CommaList = ()
    approval_expiry_s: float = Field(default=24 * 3600, gt=0)
    # Per-person daily limits (UTC days), each person's questions and model tokens; unset: no limit. A channel or
    # workspace may set its own (`relaybot channels set … user_requests_per_day=…`). LIMITS_EXEMPT: user ids never
    # limited; LIMITS_EXEMPT_APPROVERS: APPROVERS / APPROVER_ROLES (and a channel's approvers) and admins neither.
    user_requests_per_day: int | None = Field(default=None, ge=0)
    user_tokens_per_day: int | None = Field(default=None, ge=0)
    limits_exempt: CommaList = ()
    limits_exempt_approvers: bool = False
    # A channel set to respond_to=all answers at most this many unmentioned top-level messages a minute (per
    # process); past it a message gets one sentence (the first a minute) or a ✋ reaction, and a mention still works.
    respond_all_per_minute: int = Field(default=10, ge=1)
    # A reminder whose delivery fails is retried with backoff until this long after its due time.
    reminder_retry_grace_s: float = Field(default=900.0, gt=0)
    tool_approval_overrides: Annotated[dict[str, bool], NoDecode] = Field(default_factory=dict)
    # Admin rules per tool (core/tools/approval_policy.py); they win over TOOL_APPROVAL_OVERRIDES.
    tool_approval_policy: Annotated[dict[str, Any], NoDecode] = Field(default_factory=dict)
    retrieval_chunks: int = Field(default=6, ge=0)
    retrieval_doc_tokens: int = Field(default=2000, ge=0)
    # Tokens read_conversation may return (newest messages kept); the agent caps any tool result at 2000.
    read_conversation_max_tokens: int = Field(default=1500, ge=100, le=2000)
    # Learning from channels (core/learning/): how far back a chosen channel is read when none is given, the recent
    # window re-read after a restart for edits and deletes, the most channel messages outside threads one document
    # holds (a stretch is also cut at each UTC day), and how long a platform's "who can read this" is believed.
    learn_since_days: int = Field(default=90, ge=1)
    learn_rescan_days: int = Field(default=7, ge=1)
    learn_stretch_messages: int = Field(default=50, ge=1)
    learn_members_cache_s: float = Field(default=300.0, gt=0)

    # Embeddings
    embedding_provider: EmbeddingProviderName = "local"
    embedding_model: str | None = None
    embedding_base_url: str | None = None
    embedding_api_key: str | None = Field(default=None, repr=False)
    embedding_dimension: int | None = Field(default=None, ge=1)

    # Ingestion
    ingest_allow_private: bool = False
    ingest_allowed_networks: CommaList = ()
    ingest_max_url_bytes: int = Field(default=5_000_000, ge=1)
    # Fresh sources: every `relaybot run` process looks this often for sources whose sync interval has
    # passed (set per source with `relaybot ingest --sync-every`); a lease lets one process sync each.
    source_sync_enabled: bool = True
    source_sync_check_s: float = Field(default=300.0, gt=0)

    # The read_url tool: its own network allowance, as anyone in a chat may name a URL (ingesting is for operators).
    read_url_allowed_networks: CommaList = ()
    read_url_max_bytes: int = Field(default=2_000_000, ge=1)
    read_url_timeout_s: float = Field(default=15.0, gt=0)

    # The sql_query tool (registered only when SQL_QUERY_DSN is set): read-only SQL on a separate database.
    sql_query_dsn: str | None = Field(default=None, repr=False)  # may hold a password
    sql_query_allow_superuser: bool = False  # a superuser can get around the read-only checks
    sql_query_max_rows: int = Field(default=100, ge=1, le=10_000)
    sql_query_timeout_s: float = Field(default=5.0, gt=0)
    sql_query_schema_tokens: int = Field(default=1500, ge=0)
    # Bytes one value, and a whole result, may bring over the wire (cut by the database itself).
    sql_query_max_value_bytes: int = Field(default=1000, ge=16, le=1_000_000)
    sql_query_max_result_bytes: int = Field(default=100_000, ge=1000, le=100_000_000)

    # MCP servers whose tools the model may call (the `mcp` extra); their tools need approval unless trusted here.
    mcp_servers: Annotated[dict[str, Any], NoDecode] = Field(default_factory=dict, repr=False)  # may hold tokens
    mcp_safe_tools: Annotated[tuple[str, ...], NoDecode] = ()
    mcp_trust_read_only_hint: bool = False
    mcp_call_timeout_s: float = Field(default=30.0, gt=0)

    # Streaming answers (both platforms): an answer whose first text comes within this many seconds is
    # posted with it; later, a placeholder (or the running tool's line) shows meanwhile.
    stream_placeholder_after_s: float = Field(default=1.0, ge=0, le=60)
    # 👍/👎 under each final answer (both platforms); a 👎 asks why in a modal; `relaybot feedback` exports them.
    feedback_buttons: bool = True

    # Every platform (each platform's own settings are its group: adapters/<name>/settings.py)
    # A kept final (the outbox) older than this is dropped with an ERROR line: the only way one is given up.
    outbox_max_age_s: float = Field(default=86400.0, gt=0)
    # Answers one platform adapter plays at once; later questions wait their turn in arrival order.
    answers_in_flight_max: int = Field(default=100, ge=1)

    # Direct messages (Slack DMs, Discord DMs)
    direct_messages: DirectMessagePolicy = "members"

    # HTTP server
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=8080, ge=0, le=65535)

    # HTTP API (/api/answer, /v1/chat/completions): off unless enabled; keys from `relaybot keys create`.
    api_enabled: bool = False
    api_max_body_bytes: int = Field(default=1_000_000, ge=1024)

    # Shutdown
    shutdown_grace_s: float = Field(default=10.0, ge=0)

    # Several processes: each one's heartbeat (and budget shares refresh) this often; at most the default (10),
    # which the other stores' stale time (three beats) is counted in.
    heartbeat_interval_s: float = Field(default=10.0, gt=0, le=10.0)

    # Logs and metrics
    log_level: LogLevel = "INFO"
    log_format: LogFormat = "text"
    # When set, /metrics answers only requests carrying `Authorization: Bearer <token>`.
    metrics_token: str | None = Field(default=None, repr=False)

    # Secrets stored in the database (a multi-workspace Slack app's tokens) are encrypted with this: a Fernet key
    # or a passphrase of 32+ characters; `new,old` decrypts with both while every row is rewritten with the new one.
    secret_key: str | None = Field(default=None, repr=False)
    # What happens to a workspace's data when the app is uninstalled from it (or a guild removes the bot).
    uninstall_data: Literal["keep", "purge"] = "keep"

    _platform_overrides: dict[str, Any] = PrivateAttr(default_factory=dict)
    _shared_options: dict[str, Any] = PrivateAttr(default_factory=dict)
    _platform_groups: dict[type[PlatformSettings], PlatformSettings] = PrivateAttr(default_factory=dict)

    def __init__(self, **values: Any) -> None:
        # A platform's setting given in code by its flat name (slack_bot_token=…) goes to its group.
        fields = type(self).model_fields
        own = {key: value for key, value in values.items() if key.startswith("_") or key in fields}
        super().__init__(**own)
        self._platform_overrides = {key: value for key, value in values.items() if key not in own}
        self._shared_options = {key: own[key] for key in _SHARED_OPTIONS if key in own}
        for group in registered_platform_settings():
            self.platform_settings(group)  # read now: a malformed platform setting stops the start here

    def platform_settings(self, group: type[Group]) -> Group:
        """The platform's settings group, read from the same environment, .env and overrides as these settings."""
        found = self._platform_groups.get(group)
        if found is None:
            prefix = group.prefix()
            given = {key[len(prefix):]: value for key, value in self._platform_overrides.items() if key.startswith(prefix)}
            try:
                found = group(**self._shared_options, **given)
            except ValidationError as error:
                raise SettingsError(describe_validation_error(error, prefix=prefix, hints=group.hints)) from None
            self._platform_groups[group] = found
        assert isinstance(found, group)
        return found

    def platform_defaults(self, platform: str) -> PlatformDefaults:
        """A platform's channel defaults from its settings group; a platform with none gets PlatformDefaults()."""
        group = PLATFORM_SETTINGS.get(platform)
        return self.platform_settings(group).defaults() if group is not None else PlatformDefaults()

    @field_validator(
        "approvers", "approver_roles", "channel_admins", "channel_admin_roles", "ingest_allowed_networks",
        "read_url_allowed_networks", "limits_exempt", mode="before",
    )
    @classmethod
    def _split_commas(cls, value: object) -> object:
        return split_commas(value)

    # `LOG_LEVEL=debug` and `LOG_FORMAT=JSON` mean what they say.
    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_case(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("log_format", mode="before")
    @classmethod
    def _lower_case(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("database_url", "sql_query_dsn", mode="after")
    @classmethod
    def _check_database_url(cls, value: str | None) -> str | None:
        # Empty means unset: the embedded database.
        return check_database_url(value.strip()) if value and value.strip() else None

    @field_validator("llm_base_url", "embedding_base_url", mode="after")
    @classmethod
    def _check_http_url(cls, value: str | None) -> str | None:
        return optional_url(value, schemes=HTTP_SCHEMES)

    @field_validator("read_url_allowed_networks", mode="after")
    @classmethod
    def _check_networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for network in value:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"{network!r} is not a network") from None
        return value

    def secret_values(self) -> tuple[str, ...]:
        """Every secret this process was given, to be masked wherever it could be printed."""
        values: list[str] = [
            value
            for value in (
                self.llm_api_key, self.embedding_api_key, self.metrics_token, self.secret_key,
            )
            if value
        ]
        for url in (self.database_url, self.sql_query_dsn, self.llm_base_url, self.embedding_base_url):
            values.extend(url_secrets(url))
        # Every group defined, and any other read through platform_settings (bot/cli.py reads the table's).
        for group in dict.fromkeys((*registered_platform_settings(), *self._platform_groups)):
            values.extend(self.platform_settings(group).secret_values())
        for dsn in (self.database_url, self.sql_query_dsn):
            if dsn:
                # libpq's own reading also catches passwords given as query parameters and percent-encoded ones.
                options = conninfo.conninfo_to_dict(dsn)
                values.extend(str(options[key]) for key in ("password", "sslpassword") if options.get(key))
        # MCP servers are handed API keys as headers and environment variables, and sometimes in the URL.
        for server in self.mcp_servers.values():
            if isinstance(server, dict):
                values.extend(url_secrets(server.get("url") if isinstance(server.get("url"), str) else None))
                for key in ("headers", "env"):
                    if isinstance(server.get(key), dict):
                        values.extend(str(value) for value in server[key].values() if value)
        return tuple(values)

    @field_validator("tool_approval_policy", mode="after")
    @classmethod
    def _check_approval_policy(cls, value: dict[str, Any]) -> dict[str, Any]:
        from core.tools.approval_policy import parse_policy

        parse_policy(value)  # a ValueError names the malformed rule
        return value

    @field_validator("llm_model_overrides", mode="after")
    @classmethod
    def _check_model_overrides(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_model_overrides(value)

    @field_validator("system_prompt_file", mode="after")
    @classmethod
    def _check_system_prompt_file(cls, value: Path | None) -> Path | None:
        # Read when the engine is built, after the database is open: a missing file must stop the start here.
        if value is not None and not value.is_file():
            raise ValueError("no readable file is there")
        return value

    @field_validator("mcp_servers", mode="after")
    @classmethod
    def _check_mcp_servers(cls, value: dict[str, Any]) -> dict[str, Any]:
        from core.tools.mcp.config import parse_servers

        parse_servers(value)  # a ValueError names the server and what is wrong, never a header or env value
        return value

    @field_validator("mcp_safe_tools", mode="before")
    @classmethod
    def _parse_json_list(cls, value: object) -> object:
        if isinstance(value, str):
            parsed = json.loads(value) if value.strip() else []
            if not isinstance(parsed, list) or not all(isinstance(item, str) for item in parsed):
                raise ValueError("it is not a JSON list of tool names")
            return tuple(parsed)
        return value

    @field_validator("llm_model_overrides", "tool_approval_overrides", "tool_approval_policy", "mcp_servers", mode="before")
    @classmethod
    def _parse_json_object(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                parsed = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError:
                raise ValueError("it is not JSON") from None
            if not isinstance(parsed, dict):
                raise ValueError("it is not a JSON object")
            return parsed
        return value


def load_settings(**overrides: Any) -> Settings:
    """Build Settings, turning validation errors into one sentence per bad variable."""
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise SettingsError(describe_validation_error(error)) from None


def describe_validation_error(error: ValidationError, *, prefix: str = "", hints: dict[str, str] = HINTS) -> str:
    sentences = []
    for problem in error.errors():
        variable = f"{prefix}{problem['loc'][0]}".upper() if problem["loc"] else "a setting"
        hint = hints.get(variable, "a valid value")
        # Our validators' reasons read better without pydantic's "Value error, " prefix; none repeats the value.
        cause = (problem.get("ctx") or {}).get("error")
        reason = str(cause) if problem["type"] == "value_error" and cause is not None else problem["msg"]
        sentences.append(f"The setting {variable} is invalid ({reason}); set it to {hint}.")
    return " ".join(sentences)
