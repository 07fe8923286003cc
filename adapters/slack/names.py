"""Slack's half of the CLI's names (core/names.py): conversations.list and users.list, cursor-paged and paced through SlackWeb."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from adapters.streaming import CONNECTION_ERRORS, RateBudget, RateLimited, TransientSendError
from adapters.streaming.send import send_paced
from adapters.streaming.transport import PermanentSendError
from core.config import Settings
from core.names import Kind, Named, NamesUnreadable

from .budgets import ScaledClock, SlackBudgets
from .settings import SlackSettings
from .team_clients import TeamClients
from .team_tokens import OneTeamToken
from .transport import SlackWeb

# conversations.list and users.list are Tier 2: about 20 calls a minute per workspace.
LIST_CALLS_PER_MINUTE = 20.0
# Slack recommends pages of no more than 200; a workspace past MAX_PAGES pages is named in part.
PAGE_SIZE = 200
MAX_PAGES = 100
# A command waits for names a little, not as long as a delivery would: tries of one page (429s and failures alike),
# and seconds before one is given up.
LIST_ATTEMPTS = 3
LIST_TIMEOUT_S = 10
# The scopes each list needs (Slack answers missing_scope without them).
SCOPES = {"conversations.list": "channels:read and groups:read", "users.list": "users:read"}
# What the bot token sees: every public channel, and the private ones the bot is in.
CHANNEL_TYPES = "public_channel,private_channel"


class SlackNames:
    """Implements core.names.NameDirectory for the bot token's workspace: channels by name, people by display
    name (also by handle and real name); deleted people and archived channels are left out."""

    def __init__(self, web: SlackWeb, *, share: float) -> None:
        self._web = web
        self._share = share
        self._budgets: dict[tuple[str, str], RateBudget] = {}
        self._team_id: str | None = None

    async def list(self, kind: Kind, workspace: str) -> Sequence[Named]:
        method = "conversations.list" if kind == "channel" else "users.list"
        params: dict[str, Any] = (
            {"types": CHANNEL_TYPES, "exclude_archived": True} if kind == "channel" else {}
        )
        try:
            await self._check_workspace(workspace)
            items = await self._pages(method, workspace, params, "channels" if kind == "channel" else "members")
        except PermanentSendError as error:
            code = str(getattr(error, "code", "") or error)
            needs = f": the app needs the {SCOPES[method]} scope" if code == "missing_scope" else ""
            raise NamesUnreadable(f"Slack refused {method} ({code}{needs})", list_only=bool(needs)) from None
        except (RateLimited, TransientSendError, *CONNECTION_ERRORS) as error:
            raise NamesUnreadable(f"Slack could not be read: {error}") from None
        if kind == "channel":
            return [Named(id=str(c["id"]), name=str(c.get("name") or c["id"])) for c in items if c.get("id")]
        return [_person(member) for member in items if member.get("id") and not member.get("deleted")]

    async def _check_workspace(self, workspace: str) -> None:
        """The token names one workspace (auth.test, asked once): another's channels are not what it lists."""
        if self._team_id is None:
            auth = await send_paced(lambda: self._web.once(workspace, "auth.test"), clock=self._web.clock,
                                    budget=self._web.budgets.other(workspace, "auth.test"), attempts=LIST_ATTEMPTS)
            self._team_id = str(auth.get("team_id") or "")
        if workspace and self._team_id and workspace != self._team_id:
            raise NamesUnreadable(f"the bot token is for workspace {self._team_id}, not {workspace}", list_only=True)

    async def close(self) -> None:
        """Nothing held open: slack_sdk opens a session per call when given none."""

    async def _pages(self, method: str, team_id: str, params: dict[str, Any], field: str) -> list[dict[str, Any]]:
        budget = self._budget(team_id, method)
        found: list[dict[str, Any]] = []
        cursor = ""
        for _ in range(MAX_PAGES):
            page = {**params, "limit": PAGE_SIZE, **({"cursor": cursor} if cursor else {})}
            # The door's one translated try, paced on the list's budget and tried LIST_ATTEMPTS times.
            response = await send_paced(partial(self._web.once, team_id, method, **page), budget=budget, clock=self._web.clock,
                                        attempts=LIST_ATTEMPTS)
            found.extend(dict(item) for item in response.get(field) or () if isinstance(item, dict))
            cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                break
        return found

    def _budget(self, team_id: str, method: str) -> RateBudget:
        key = (team_id, method)
        if key not in self._budgets:
            self._budgets[key] = RateBudget.per_minute(LIST_CALLS_PER_MINUTE, share=self._share, clock=self._web.clock)
        return self._budgets[key]


def _person(member: dict[str, Any]) -> Named:
    """A person as Slack shows them: their display name, else their real name, else their handle."""
    profile = member.get("profile") if isinstance(member.get("profile"), dict) else {}
    names = [str(n) for n in (profile.get("display_name"), profile.get("real_name"), member.get("real_name"),
                              member.get("name")) if n]
    return Named(id=str(member["id"]), name=names[0] if names else str(member["id"]),
                 also=tuple(dict.fromkeys(names[1:])))


class NoNamesWithSeveralWorkspaces:
    """Several workspaces and no SLACK_BOT_TOKEN: the tokens are the stored installs', which the CLI's names do not
    open; every look-up says so (instead of "Slack is not configured")."""

    async def list(self, kind: Kind, workspace: str) -> Sequence[Named]:
        raise NamesUnreadable("with several workspaces the CLI reads no Slack names: SLACK_BOT_TOKEN is not set")

    async def close(self) -> None:
        """Nothing held open."""


def slack_names(settings: Settings) -> SlackNames | NoNamesWithSeveralWorkspaces | None:
    """The directory over Slack's door with SLACK_BOT_TOKEN; None where Slack is not configured."""
    slack = settings.platform_settings(SlackSettings)
    if not slack.bot_token:
        return NoNamesWithSeveralWorkspaces() if slack.multi_workspace else None
    clock = ScaledClock()
    budgets = SlackBudgets(clock=clock, share=slack.rate_share, history_tier=slack.history_tier)
    # No retry handler of slack_sdk's own: the attempts above are the only ones.
    clients = TeamClients(OneTeamToken(slack.bot_token), base_url=slack.api_url, timeout_s=LIST_TIMEOUT_S)
    return SlackNames(SlackWeb(clients, budgets=budgets, clock=clock), share=slack.rate_share)
