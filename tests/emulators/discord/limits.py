"""Discord's message limits (400 / code 50035) and the emulator's rate-limit buckets."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from tests.emulators.discord.models import JSONDict

MAX_CONTENT_CHARS = 2_000
MAX_EMBEDS = 10
MAX_EMBED_DESCRIPTION_CHARS = 4_096
MAX_EMBED_TITLE_CHARS = 256
MAX_EMBEDS_TOTAL_CHARS = 6_000
MAX_CUSTOM_ID_CHARS = 100
INVALID_FORM_BODY_CODE = 50035
EMPTY_MESSAGE_CODE = 50006


def _error(code: str, message: str) -> JSONDict:
    return {"_errors": [{"code": code, "message": message}]}


def _embed_chars(embed: JSONDict) -> int:
    total = len(str(embed.get("title") or "")) + len(str(embed.get("description") or ""))
    for embed_field in embed.get("fields") or []:
        total += len(str(embed_field.get("name") or "")) + len(str(embed_field.get("value") or ""))
    total += len(str((embed.get("footer") or {}).get("text") or ""))
    total += len(str((embed.get("author") or {}).get("name") or ""))
    return total


def _component_errors(components: list[Any]) -> JSONDict:
    errors: JSONDict = {}
    for row_index, row in enumerate(components):
        children = row.get("components") or [] if isinstance(row, dict) else []
        for child_index, child in enumerate(children):
            custom_id = child.get("custom_id")
            if custom_id is None and child.get("style") == 5:
                continue  # link buttons carry a url, not a custom_id
            if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= MAX_CUSTOM_ID_CHARS:
                errors.setdefault(str(row_index), {"components": {}})["components"][str(child_index)] = {
                    "custom_id": _error("BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")
                }
    return errors


def message_body_errors(body: JSONDict) -> JSONDict:
    """The `errors` object Discord would answer for this message body; empty when valid."""
    errors: JSONDict = {}
    content = body.get("content")
    if isinstance(content, str) and len(content) > MAX_CONTENT_CHARS:
        errors["content"] = _error("BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")
    embeds = body.get("embeds") or []
    if len(embeds) > MAX_EMBEDS:
        errors["embeds"] = _error("BASE_TYPE_MAX_LENGTH", "Must be 10 or fewer in length.")
    embed_errors: JSONDict = {}
    for index, embed in enumerate(embeds[:MAX_EMBEDS]):
        if len(str(embed.get("description") or "")) > MAX_EMBED_DESCRIPTION_CHARS:
            embed_errors[str(index)] = {
                "description": _error("BASE_TYPE_MAX_LENGTH", "Must be 4096 or fewer in length.")
            }
        elif len(str(embed.get("title") or "")) > MAX_EMBED_TITLE_CHARS:
            embed_errors[str(index)] = {"title": _error("BASE_TYPE_MAX_LENGTH", "Must be 256 or fewer in length.")}
    if embed_errors:
        errors["embeds"] = embed_errors
    elif "embeds" not in errors and sum(_embed_chars(embed) for embed in embeds) > MAX_EMBEDS_TOTAL_CHARS:
        errors["embeds"] = _error("MAX_EMBED_SIZE_EXCEEDED", "Embed size exceeds maximum size of 6000")
    component_errors = _component_errors(body.get("components") or [])
    if component_errors:
        errors["components"] = component_errors
    return errors


def invalid_form_body(errors: JSONDict) -> JSONDict:
    return {"code": INVALID_FORM_BODY_CODE, "message": "Invalid Form Body", "errors": errors}


def is_empty_message(body: JSONDict, *, attachment_count: int = 0) -> bool:
    return not (body.get("content") or body.get("embeds") or body.get("components") or attachment_count)


@dataclass(frozen=True, kw_only=True)
class BucketDecision:
    """The outcome of one request against a bucket, with the headers Discord would send."""

    allowed: bool
    headers: dict[str, str]
    retry_after_s: float


class FixedWindowBucket:
    """A Discord-style bucket: `limit` requests per window, reset when the window ends."""

    def __init__(self, *, name: str, limit: int, window_s: float) -> None:
        self.name = name
        self.limit = limit
        self.window_s = window_s
        self._used = 0
        self._reset_at = 0.0  # loop-independent monotonic clock

    def take(self, *, bucket_hash: str) -> BucketDecision:
        now = time.monotonic()
        if now >= self._reset_at:
            self._used = 0
            self._reset_at = now + self.window_s
        reset_after = max(self._reset_at - now, 0.001)
        allowed = self._used < self.limit
        if allowed:
            self._used += 1
        headers = {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(max(self.limit - self._used, 0)),
            "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
            "X-RateLimit-Reset-After": f"{reset_after:.3f}",
            "X-RateLimit-Bucket": bucket_hash,
        }
        if not allowed:
            headers["X-RateLimit-Scope"] = "user"
            headers["Retry-After"] = str(math.ceil(reset_after))
            # discord.py retries a 429 only when it looks like it came through Discord's proxy.
            headers["Via"] = "1.1 google"
        return BucketDecision(allowed=allowed, headers=headers, retry_after_s=reset_after)


class RateLimiter:
    """All buckets of one emulator, keyed by (bucket name, major resource id)."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, int], FixedWindowBucket] = {}

    def take(self, *, name: str, resource_id: int, limit: int, window_s: float, bucket_hash: str) -> BucketDecision:
        key = (name, resource_id)
        bucket = self._buckets.get(key)
        if bucket is None or bucket.limit != limit or bucket.window_s != window_s:
            bucket = self._buckets[key] = FixedWindowBucket(name=name, limit=limit, window_s=window_s)
        return bucket.take(bucket_hash=bucket_hash)
