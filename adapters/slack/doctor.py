"""`relaybot doctor`'s Slack line: do the configured tokens work (auth.test)?"""

from __future__ import annotations

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from core.config import Settings


async def check_slack(settings: Settings) -> str:
    """One line saying whether Slack is configured and the bot token is accepted."""
    if not settings.slack_bot_token:
        return "Slack: not configured (SLACK_BOT_TOKEN is not set)."
    client = AsyncWebClient(token=settings.slack_bot_token, base_url=settings.slack_api_url)
    try:
        auth = await client.auth_test()
    except SlackApiError as exc:
        return f"Slack: the bot token was refused ({exc.response.get('error', 'unknown error')})."
    except Exception as exc:
        return f"Slack: cannot reach {settings.slack_api_url} ({exc.__class__.__name__}: {exc})."
    mode = "Socket Mode" if settings.slack_app_token else "HTTP mode at /slack/events"
    missing = "" if settings.slack_app_token or settings.slack_signing_secret else " — SLACK_SIGNING_SECRET is missing"
    return f"Slack: ok, bot {auth.get('user')} ({auth.get('user_id')}) in {auth.get('team')} ({auth.get('team_id')}), {mode}{missing}."
