"""CLI polish: --version, global flags after the subcommand, errors on stderr, LOG_LEVEL, and LOG_FORMAT=json (redacted)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sys
from pathlib import Path

import pytest

from bot.cli import RedactingJsonFormatter, build_parser, log_formatter, version
from core import observe
from core.observe import RunContextFilter

REPO = Path(__file__).resolve().parents[2]
SECRET = "pw-json-SECRET-5f1a"


def env(**values: str) -> dict[str, str]:
    kept = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE", "TMPDIR")}
    kept.update(PYTHONPATH=str(REPO), EMBEDDING_PROVIDER="none", **values)
    return kept


async def relaybot(*args: str, environment: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, env=environment, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    return process.returncode or 0, stdout.decode(), stderr.decode()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_version_before_or_after_a_subcommand(tmp_path: Path) -> None:
    every = (("--version",), ("run", "--version"), ("sources", "list", "--version"))
    # Started together: each its own process, nothing shared.
    results = await asyncio.gather(*(relaybot(*args, environment=env(), cwd=tmp_path) for args in every))
    for args, (code, out, err) in zip(every, results):
        assert (code, out, err) == (0, f"relaybot {version()}\n", ""), args


def test_global_flags_are_read_after_the_subcommand_too() -> None:
    parser = build_parser()
    assert parser.parse_args(["run"]).verbose is False
    for argv in (["-v", "run"], ["run", "-v"], ["run", "--verbose"], ["sources", "list", "-v"], ["usage", "--by", "user", "-v"]):
        assert parser.parse_args(argv).verbose is True, argv


async def test_migrate_dash_v_after_the_subcommand_logs_debug_lines(database_url: str, tmp_path: Path) -> None:
    code, out, err = await relaybot("migrate", "-v", environment=env(DATABASE_URL=database_url), cwd=tmp_path)
    assert code == 0, err
    assert " DEBUG " in err and "applied" in out


async def test_errors_go_to_stderr_and_nothing_to_stdout(tmp_path: Path) -> None:
    unreachable = env(DATABASE_URL=f"postgresql://app@127.0.0.1:{closed_port()}/app?connect_timeout=2")
    cases = (
        (("bogus",), env(), 2),
        (("usage", "--by", "week"), env(), 2),
        (("migrate",), unreachable, 1),
        (("usage",), unreachable, 1),
        (("sources", "list"), unreachable, 1),
        (("doctor",), env(LOG_LEVEL="chatty"), 2),
    )
    # Started together: each its own process, nothing shared.
    *results, (_, _, err) = await asyncio.gather(
        *(relaybot(*args, environment=environment, cwd=tmp_path) for args, environment, _ in cases),
        relaybot("doctor", environment=env(LOG_LEVEL="chatty"), cwd=tmp_path),
    )
    for (args, _, expected_code), (code, out, err_of_case) in zip(cases, results):
        assert code == expected_code, (args, out, err_of_case)
        assert out == "", (args, out)
        assert err_of_case.strip() and "Traceback" not in err_of_case, (args, err_of_case)
    assert "LOG_LEVEL" in err


async def test_log_level_warning_hides_info_lines(database_url: str, tmp_path: Path) -> None:
    code, out, err = await relaybot("migrate", environment=env(DATABASE_URL=database_url, LOG_LEVEL="warning"), cwd=tmp_path)
    assert code == 0, err
    assert " INFO " not in err


async def test_json_logs_are_one_object_a_line_with_no_secret(database_url: str, tmp_path: Path) -> None:
    assert "postgres:@" in database_url
    secret_url = database_url.replace("postgres:@", f"postgres:{SECRET}@")
    fresh = secret_url.replace("/t_", "/missing_t_", 1)  # a database that is not there: an error line too
    results = await asyncio.gather(
        *(relaybot("-v", "migrate", environment=env(DATABASE_URL=url, LOG_FORMAT="JSON"), cwd=tmp_path)
          for url in (secret_url, fresh))
    )
    for code, out, err in results:
        lines = [line for line in err.splitlines() if line.strip()]
        records = [json.loads(line) for line in lines if not line.startswith("relaybot: ")]
        assert records, err
        assert all({"time", "level", "logger", "message", "run_id", "conversation"} <= set(r) for r in records)
        assert SECRET not in out + err


def test_json_formatter_redacts_message_arguments_extra_fields_and_tracebacks() -> None:
    formatter = RedactingJsonFormatter(secrets=[SECRET])
    try:
        raise RuntimeError(f"connect to postgresql://app:{SECRET}@db/app failed")
    except RuntimeError:
        record = logging.getLogger("t").makeRecord(
            "t", logging.ERROR, __file__, 1, "token %s leaked at %s", (SECRET, "https://x/?token=abc123xyz"),
            sys.exc_info(), extra={"detail": {"nested": [f"key={SECRET}"]}},
        )
    RunContextFilter().filter(record)
    line = formatter.format(record)
    assert SECRET not in line and "abc123xyz" not in line
    data = json.loads(line)
    assert data["message"] == "token *** leaked at https://x/?token=***"
    assert data["detail"] == {"nested": ["key=***"]} and "RuntimeError" in data["exc_info"]


def test_text_lines_carry_the_run_and_conversation() -> None:
    formatter = log_formatter("text", secrets=[SECRET])
    with observe.run_scope(run_id="abc123", conversation="slack:T:C:1.0"):
        record = logging.getLogger("t").makeRecord("t", logging.INFO, __file__, 1, "answer %s", (SECRET,), None)
        RunContextFilter().filter(record)
    assert formatter.format(record).endswith(" INFO t [run abc123 slack:T:C:1.0]: answer ***")


@pytest.mark.parametrize(("value", "expected"), [("debug", "DEBUG"), (" Warning ", "WARNING")])
def test_log_level_is_read_in_any_case(value: str, expected: str) -> None:
    from core.config import Settings

    assert Settings(_env_file=None, log_level=value, log_format="JSON").log_level == expected


def test_exceptions_python_would_print_past_the_formatter_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    from bot.cli import _log_unraisable

    class Unraisable:
        exc_type, exc_value, exc_traceback = RuntimeError, RuntimeError(f"closing {SECRET}"), None
        err_msg = "Exception ignored in"
        object = "a finaliser"

    caplog.set_level(logging.WARNING)
    _log_unraisable(Unraisable())
    [record] = caplog.records
    assert record.getMessage() == "Exception ignored in: 'a finaliser'" and record.exc_info is not None
    assert SECRET not in log_formatter("json", secrets=[SECRET]).format(record)
