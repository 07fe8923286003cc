"""For observability tests: Prometheus samples by name and labels, and the tokens the OpenAI emulator reported."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import REGISTRY

from core.observe import RunContextFilter
from tests.emulators import openai_server


def sample(name: str, **labels: str) -> float:
    """The current value of one sample of the process-wide registry (0 when it was never recorded)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


@dataclass
class ReportedUsage:
    """Every `usage` object the emulator sent, in order."""

    reports: list[dict[str, int]] = field(default_factory=list)

    @property
    def prompt_tokens(self) -> int:
        return sum(report["prompt_tokens"] for report in self.reports)

    @property
    def completion_tokens(self) -> int:
        return sum(report["completion_tokens"] for report in self.reports)


def record_reported_usage(monkeypatch: pytest.MonkeyPatch) -> ReportedUsage:
    """Wraps the emulator's usage function, so a test knows exactly what the model "reported"."""
    reported = ReportedUsage()
    original = openai_server._usage

    def recording(body: dict[str, Any], completion_tokens: int) -> dict[str, int]:
        usage = original(body, completion_tokens)
        reported.reports.append(usage)
        return usage

    monkeypatch.setattr(openai_server, "_usage", recording)
    return reported


@contextmanager
def run_context_on(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> Iterator[None]:
    """caplog's records get run_id and conversation, as the process's own handler adds them."""
    caplog.set_level(level)
    context = RunContextFilter()
    caplog.handler.addFilter(context)
    try:
        yield
    finally:
        caplog.handler.removeFilter(context)


def records_with(caplog: pytest.LogCaptureFixture, **fields: Any) -> list[logging.LogRecord]:
    """The captured records whose attributes include all of `fields`."""
    return [r for r in caplog.records if all(getattr(r, key, None) == value for key, value in fields.items())]
