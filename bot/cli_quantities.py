"""Durations and sizes as the CLI reads and prints them: 30m, 24h, 7d, 0 for never; 500k, 20MB, 1G."""

from __future__ import annotations

import argparse
import re

_DURATION_RE = re.compile(r"^\s*(\d+)\s*([smhdw]?)\s*$", re.IGNORECASE)
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmg]?)b?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3}


def parse_duration(text: str) -> int:
    """Seconds from "90", "90s", "15m", "1h", "2d" or "1w"; 0 means never."""
    match = _DURATION_RE.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; write e.g. 30m, 1h, 24h, 7d, or 0 for never")
    return int(match[1]) * _DURATION_UNITS[match[2].lower()]


def parse_size(text: str) -> int:
    """Bytes from "5000000", "500k", "20MB" or "1G" (powers of 1000)."""
    match = _SIZE_RE.match(text)
    if match is None or int(match[1]) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; write e.g. 500k, 20MB or 1G")
    return int(match[1]) * _SIZE_UNITS[match[2].lower()]


def positive(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


def format_duration(seconds: int | None) -> str:
    if not seconds:
        return "never"
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
