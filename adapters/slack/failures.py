"""Slack's failures read by the one rule: 429 → RateLimited, an error documented as permanent → SlackPermanentError, everything else → TransientSendError."""

from __future__ import annotations

from slack_sdk.errors import SlackApiError

from adapters.streaming import CONNECTION_ERRORS, RateLimited, TransientSendError, classify_failure, parse_retry_after
from adapters.streaming.transport import PermanentSendError

# Slack's own words for "try again": its 5xx-like errors arrive as 200 with ok=false.
TRANSIENT_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})
# Slack errors that mean "this call will never succeed as it is" (for the call, or the whole team); every
# other failure is retried, however long it takes.
PERMANENT_ERRORS = frozenset({
    "channel_not_found", "not_in_channel", "is_archived", "msg_too_long", "no_text", "thread_not_found",
    "message_not_found", "cant_update_message", "cant_delete_message", "edit_window_closed", "restricted_action",
    "restricted_action_thread_only", "restricted_action_read_only_channel", "cannot_reply_to_message",
    "invalid_blocks", "invalid_blocks_format", "invalid_metadata_format", "invalid_arguments", "too_many_attachments",
    "channel_is_archived", "user_not_found", "user_not_in_channel", "expired_trigger_id", "invalid_trigger_id",
    "exchanged_trigger_id", "method_not_supported", "not_allowed_token_type", "missing_scope", "not_authed",
    "account_inactive", "no_permission", "ekm_access_denied", "team_access_not_granted",
})
TEAM_PERMANENT_ERRORS = frozenset({"invalid_auth", "token_revoked", "token_expired", "account_inactive", "team_not_found"})


class SlackPermanentError(PermanentSendError, SlackApiError):
    """A Slack error documented as permanent for the call (or the team); still a SlackApiError for its callers."""

    def __init__(self, exc: SlackApiError, *, code: str, team_wide: bool) -> None:
        Exception.__init__(self, *exc.args)  # SlackApiError's own text, said once
        self.response = exc.response
        self.code = code
        self.team_wide = team_wide


def translate_error(exc: BaseException, *, time_scale: float) -> BaseException:
    """Slack's failures by the one rule: 429 → RateLimited, a documented permanent error → SlackPermanentError,
    everything else (5xx, an error Slack does not document as final, a dropped connection) → TransientSendError.

    `Retry-After` is in real seconds; budgets run on Slack time, hence the scale.
    """
    if isinstance(exc, (RateLimited, TransientSendError, PermanentSendError)):
        return exc
    if isinstance(exc, SlackApiError):
        response = exc.response
        error = str(response.get("error", "")) if response is not None else ""
        status = response.status_code if response is not None else 0
        if error == "ratelimited":
            status = 429
        elif error in TRANSIENT_ERRORS:
            status = max(status, 503)
        headers = response.headers if response is not None else {}
        retry_after = parse_retry_after(headers.get("Retry-After") or headers.get("retry-after"))
        signal = classify_failure(
            status=status,
            retry_after_s=retry_after / time_scale if retry_after is not None else None,
            detail=f"Slack answered {status} {error}",
        )
        if signal is not None:
            return signal
        if error in PERMANENT_ERRORS or error in TEAM_PERMANENT_ERRORS:
            return SlackPermanentError(exc, code=error, team_wide=error in TEAM_PERMANENT_ERRORS)
        return TransientSendError(f"Slack answered {status} {error or 'an error it does not document as final'}")
    if isinstance(exc, CONNECTION_ERRORS):
        return TransientSendError(f"could not reach Slack: {exc!r}")
    return exc
