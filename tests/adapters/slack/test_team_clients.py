"""The per-team clients behind SlackWeb: each call with its team's current token, a rotated token picked up at the
next call, a team without one failing at once, permanently, with one log line; the TeamKey a request names, and the
CLI's names with several workspaces (issue 25)."""

from __future__ import annotations

import logging
from functools import partial

import pytest

from adapters.slack.names import slack_names
from adapters.slack.team_clients import SlackNotInstalled, TeamClients
from adapters.slack.team_tokens import NotInstalled, TeamKey, team_of
from adapters.slack.transport import ScaledClock, SlackBudgets, SlackWeb
from adapters.streaming import TransientSendError
from adapters.streaming.transport import is_permanent
from core.config import Settings
from core.names import NameBook, NamesUnreadable
from core.store.app_state import AppStateStore
from core.store.db import Database
from tests.emulators.slack import SlackEmulator
from tests.fixtures.slack import slack_emulator  # noqa: F401

TEAM_B = "T0000TEAMB"


class Tokens:
    """A test double of TeamTokens: the token each team has now (none: not installed); counts the asks."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self.tokens = dict(tokens)
        self.asked: list[TeamKey] = []

    async def bot_token(self, team: TeamKey) -> str:
        self.asked.append(team)
        if team.team_id not in self.tokens:
            raise NotInstalled(team)
        return self.tokens[team.team_id]


def web_over(slack: SlackEmulator, tokens: Tokens) -> SlackWeb:
    clock = ScaledClock(slack.time_scale)
    return SlackWeb(TeamClients(tokens, base_url=slack.api_url), budgets=SlackBudgets(clock=clock, share=1.0), clock=clock)


async def test_each_team_is_called_with_its_own_token(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    slack = slack_emulator
    other = slack.add_team(TEAM_B)
    slack.add_channel("C0000AAAA1", name="a")
    slack.add_channel("C0000BBBB1", name="b", team_id=TEAM_B)
    web = web_over(slack, Tokens({slack.team_id: slack.bot_token, TEAM_B: other.bot_token}))
    await web.post(team_id=slack.team_id, channel="C0000AAAA1", thread_ts=None, text="to a")
    await web.post(team_id=TEAM_B, channel="C0000BBBB1", thread_ts=None, text="to b")
    await web.call(TEAM_B, "chat.update", budget=web.budgets.edit(TEAM_B), channel="C0000BBBB1",
                   ts=slack.messages("C0000BBBB1")[0].ts, text="b, edited")
    assert [(c.method, c.team_id) for c in slack.calls_by_token(slack.bot_token)] == [("chat.postMessage", slack.team_id)]
    assert [(c.method, c.team_id) for c in slack.calls_by_token(other.bot_token)] == [
        ("chat.postMessage", TEAM_B), ("chat.update", TEAM_B)]
    assert all(c.error is None for c in slack.calls)


async def test_a_rotated_token_is_used_from_the_next_call_on(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    slack = slack_emulator
    slack.grant_token("xoxb-first", slack.team_id)
    tokens = Tokens({slack.team_id: "xoxb-first"})
    web = web_over(slack, tokens)
    first = await web.clients.client(slack.team_id)
    await web.once(slack.team_id, "chat.postMessage", channel="C0000ROTA1", text="before")
    assert await web.clients.client(slack.team_id) is first  # the same token keeps its client
    slack.grant_token("xoxb-second", slack.team_id)
    slack.revoke_token("xoxb-first")  # Slack revokes the old token once the refresh is used
    tokens.tokens[slack.team_id] = "xoxb-second"
    await web.once(slack.team_id, "chat.postMessage", channel="C0000ROTA1", text="after")
    assert [c.token for c in slack.calls] == ["xoxb-first", "xoxb-second"]
    assert [m.text for m in slack.messages("C0000ROTA1")] == ["before", "after"]


async def test_a_token_revoked_under_a_call_is_asked_for_again_once(slack_emulator: SlackEmulator) -> None:  # noqa: F811
    """Another process rotated it: the refused call goes again with the token the source gives now."""
    slack = slack_emulator
    slack.grant_token("xoxb-stale", slack.team_id)
    tokens = Tokens({slack.team_id: "xoxb-stale"})
    web = web_over(slack, tokens)
    await web.clients.client(slack.team_id)  # this process holds the stale token's client
    slack.revoke_token("xoxb-stale")
    slack.grant_token("xoxb-fresh", slack.team_id)

    real = tokens.bot_token
    calls = 0

    async def rotated_after_the_first_ask(team: TeamKey) -> str:
        nonlocal calls
        calls += 1
        if calls > 1:
            tokens.tokens[slack.team_id] = "xoxb-fresh"
        return await real(team)

    tokens.bot_token = rotated_after_the_first_ask  # type: ignore[method-assign]
    await web.once(slack.team_id, "chat.postMessage", channel="C0000ROTA2", text="once")
    assert [(c.token, c.error) for c in slack.calls] == [("xoxb-stale", "invalid_auth"), ("xoxb-fresh", None)]
    assert [m.text for m in slack.messages("C0000ROTA2")] == ["once"]


async def test_a_team_without_a_token_fails_at_once_permanently_and_says_so_once(
    slack_emulator: SlackEmulator, caplog: pytest.LogCaptureFixture,  # noqa: F811
) -> None:
    slack = slack_emulator
    tokens = Tokens({slack.team_id: slack.bot_token})
    web = web_over(slack, tokens)
    caplog.set_level(logging.WARNING, logger="adapters.slack.team_clients")
    for _ in range(2):
        with pytest.raises(SlackNotInstalled) as raised:
            # The paced lanes retry a transient failure however long it takes: this one is not retried.
            await web.post(team_id="T0000GONE1", channel="C0000GONE1", thread_ts=None, text="never sent")
        assert is_permanent(raised.value) and raised.value.team_wide
        assert "not installed in Slack team T0000GONE1" in str(raised.value)
    assert slack.calls == []  # nothing reached Slack
    assert [t.team_id for t in tokens.asked] == ["T0000GONE1", "T0000GONE1"]  # one ask per call, no loop
    lines = [r.getMessage() for r in caplog.records if "T0000GONE1" in r.getMessage()]
    assert len(lines) == 1 and "no bot token" in lines[0]
    # Installed again: its calls go through, and the next loss is said again.
    tokens.tokens["T0000GONE1"] = slack.add_team("T0000GONE1").bot_token
    await web.post(team_id="T0000GONE1", channel="C0000GONE1", thread_ts=None, text="back")
    del tokens.tokens["T0000GONE1"]
    with pytest.raises(SlackNotInstalled):
        await web.once("T0000GONE1", "chat.postMessage", channel="C0000GONE1", text="gone again")
    assert len([r for r in caplog.records if "T0000GONE1" in r.getMessage()]) == 2


async def test_a_grid_workspace_named_by_its_team_id_reaches_the_org_its_events_named_after_a_restart_too(
    db: Database,
) -> None:
    tokens = Tokens({})
    clients = TeamClients(tokens, base_url="http://127.0.0.1:9/api/", state=AppStateStore(db))
    assert await clients.key("T0000GRID1") == TeamKey("T0000GRID1")
    await clients.learn(TeamKey("T0000GRID1", enterprise_id="E0000ORG01"))
    assert await clients.key("T0000GRID1") == TeamKey("T0000GRID1", enterprise_id="E0000ORG01")
    with pytest.raises(SlackNotInstalled):
        await clients.client("T0000GRID1")
    assert tokens.asked == [TeamKey("T0000GRID1", enterprise_id="E0000ORG01")]
    # Another process (or this one restarted) has seen no event of it yet: the org is read back.
    restarted = TeamClients(tokens, base_url="http://127.0.0.1:9/api/", state=AppStateStore(db))
    assert await restarted.key("T0000GRID1") == TeamKey("T0000GRID1", enterprise_id="E0000ORG01")
    assert await restarted.key("T0000PLAIN") == TeamKey("T0000PLAIN")


async def test_tokens_that_cannot_be_read_now_are_a_transient_failure_not_a_permanent_one(
    slack_emulator: SlackEmulator,  # noqa: F811
) -> None:
    """The installs' database away: the call waits and is tried again, as for a 5xx, and is never given up."""
    slack = slack_emulator
    tokens = Tokens({slack.team_id: slack.bot_token})
    web = web_over(slack, tokens)
    real = tokens.bot_token
    failures = 2

    async def database_away_twice(team: TeamKey) -> str:
        nonlocal failures
        if failures:
            failures -= 1
            raise OSError("connection refused")
        return await real(team)

    tokens.bot_token = database_away_twice  # type: ignore[method-assign]
    with pytest.raises(TransientSendError):
        await web.once(slack.team_id, "chat.postMessage", channel="C0000AWAY1", text="not yet")
    # The paced lane retries it until the tokens can be read again.
    await web.post(team_id=slack.team_id, channel="C0000AWAY1", thread_ts=None, text="later")
    assert [m.text for m in slack.messages("C0000AWAY1")] == ["later"]


def test_the_team_a_request_names_events_clicks_views_and_org_wide_installs() -> None:
    event = {"type": "event_callback", "team_id": "T1", "enterprise_id": None,
             "authorizations": [{"team_id": "T1", "enterprise_id": None, "is_enterprise_install": False}]}
    assert team_of(event) == TeamKey("T1")
    # An org-wide install's event: its authorization names the org and no team; the workspace is the body's.
    org_wide = {"type": "event_callback", "team_id": "T2", "enterprise_id": "E1",
                "authorizations": [{"team_id": None, "enterprise_id": "E1", "is_enterprise_install": True}]}
    assert team_of(org_wide) == TeamKey("T2", enterprise_id="E1")
    click = {"type": "block_actions", "team": {"id": "T3", "domain": "three"}, "enterprise": {"id": "E2"},
             "user": {"id": "U1", "team_id": "T9"}}
    assert team_of(click) == TeamKey("T3", enterprise_id="E2")
    # A click whose team Slack left out (org-wide installs' interactivity may): the clicker's own.
    assert team_of({"type": "block_actions", "team": None, "user": {"id": "U1", "team_id": "T4"}}) == TeamKey("T4")
    assert team_of({}) == TeamKey("")


async def test_the_clis_names_with_several_workspaces_and_no_bot_token_say_why_they_cannot_be_read() -> None:
    settings = Settings(_env_file=None, slack_client_id="1.2", slack_client_secret="s")  # type: ignore[call-arg]
    book = NameBook({"slack": partial(slack_names, settings)})
    with pytest.raises(NamesUnreadable) as raised:
        await book.resolve("slack", "T0000TEAMB", "channel", "#general")
    assert "with several workspaces the CLI reads no Slack names" in str(raised.value)
    assert "not configured" not in str(raised.value)
