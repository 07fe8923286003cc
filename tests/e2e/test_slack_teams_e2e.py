"""Several Slack workspaces installed (stored installs on Postgres): each team's events, clicks, kept finals and
calls with its own token — the emulator refuses another team's — and an uninstalled team's work stopped, the
others untouched (issue 25)."""

from __future__ import annotations

import asyncio

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from slack_sdk.oauth.installation_store import Installation

from adapters.http.server import HttpServer
from adapters.slack import SlackAdapter
from adapters.slack.installations import Sealer, SlackInstallations
from adapters.slack.oauth import register_uninstall
from adapters.slack.surface import ReplyTarget, SlackShownMessages
from bot.jobs import expire_approvals
from core.engine import Engine
from core.ports import FinalPart, LiveMessage, PendingFinal
from core.requests import ConversationKey
from core.store.db import Database
from core.store.installations import InstallStore
from core.store.pending_finals import PendingFinals
from core.tools import ToolRegistry
from core.tools.read_conversation import PlatformReaders
from tests.e2e.slack_harness import deploy_registry, eventually
from tests.e2e.test_unseen_post_repair import NOTE_MARK, died_before_the_reply
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.emulators.slack import SlackEmulator, Team, app_home_opened_event, app_mention_event
from tests.emulators.slack.oauth import DEFAULT_CLIENT_ID
from tests.support.engine import make_engine
from tests.support.ports import ports_for

pytestmark = pytest.mark.timeout(60)

TEAM_B = "T0000TEAMB"
CHANNEL_A = "C0000AAAA1"
CHANNEL_B = "C0000BBBB1"
ALICE = "U0000ALICE"  # of team A
BRUNO = "U0000BRUNO"  # of team B
KEY = "a passphrase that is long enough to seal the tokens"


@dataclass(kw_only=True)
class TeamsBot:
    adapter: SlackAdapter
    engine: Engine
    http: HttpServer
    installations: SlackInstallations

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.port}/slack/events"

    async def stop(self) -> None:
        await self.adapter.stop_accepting()
        await self.adapter.close()
        await self.http.stop()


@dataclass(kw_only=True)
class Workspaces:
    slack: SlackEmulator
    a: Team
    b: Team
    tokens: dict[str, str]  # team id → the bot token its install got

    def team_of(self, token: str) -> str | None:
        return next((team for team, own in self.tokens.items() if own == token), None)


def installations(db: Database) -> SlackInstallations:
    return SlackInstallations(InstallStore(db), sealer=Sealer(KEY), client_id=DEFAULT_CLIENT_ID)


async def install(db: Database, slack: SlackEmulator, team: Team) -> str:
    """The team's install as the OAuth flow stores it (its token issued by the emulator's oauth.v2.access)."""
    token = slack.oauth.issue(team.team_id).access_token
    await installations(db).async_save(Installation(
        app_id=slack.app_id, enterprise_id=None, team_id=team.team_id, team_name=team.name, bot_token=token,
        bot_id=team.bot_id, bot_user_id=team.bot_user_id, bot_scopes="chat:write,app_mentions:read",
        user_id="UINSTALLER", is_enterprise_install=False,
    ))
    return token


@pytest.fixture
async def teams(db: Database, slack_emulator: SlackEmulator) -> Workspaces:
    slack = slack_emulator
    a, b = slack.team(), slack.add_team(TEAM_B, name="Team B")
    slack.add_channel(CHANNEL_A, name="a-general")
    slack.add_channel(CHANNEL_B, name="b-general", team_id=TEAM_B)
    slack.add_user(ALICE)
    slack.add_user(BRUNO, team_id=TEAM_B)
    # Only the installs' tokens work: the emulator's own per-team tokens are not the bot's.
    slack.revoke_token(a.bot_token)
    slack.revoke_token(b.bot_token)
    tokens = {a.team_id: await install(db, slack, a), TEAM_B: await install(db, slack, b)}
    return Workspaces(slack=slack, a=a, b=b, tokens=tokens)


async def start_teams_bot(db: Database, slack: SlackEmulator, llm_url: str, *, registry: ToolRegistry | None = None,
                          **overrides: Any) -> TeamsBot:
    """The real SlackAdapter with several workspaces: no SLACK_BOT_TOKEN, every token from the stored installs."""
    settings: dict[str, Any] = {
        "slack_bot_token": None, "slack_signing_secret": slack.signing_secret, "slack_api_url": slack.api_url,
        "http_port": 0, "slack_native_streaming": "off", **overrides,
    }
    readers = PlatformReaders()
    engine = make_engine(db, llm_url, registry=registry, **settings)
    http = HttpServer(host="127.0.0.1", port=0)
    stored = installations(db)
    adapter = SlackAdapter(settings=engine.settings, engine=engine, ports=ports_for(db), http=http,
                           time_scale=slack.time_scale, tokens=stored, installation_store=stored)
    register_uninstall(adapter.app, stored)
    readers.register(adapter.platform, adapter.reader)
    await http.start()
    await adapter.start()
    return TeamsBot(adapter=adapter, engine=engine, http=http, installations=stored)


@pytest.fixture
def registry() -> ToolRegistry:
    return deploy_registry()


@pytest.fixture
async def bot(db: Database, teams: Workspaces, openai_emulator: OpenAIEmulator,
              registry: ToolRegistry) -> AsyncIterator[TeamsBot]:
    started = await start_teams_bot(db, teams.slack, openai_emulator.base_url, registry=registry)
    yield started
    await started.stop()


def ask(slack: SlackEmulator, team: Team, channel: str, user: str, text: str) -> dict[str, Any]:
    full = f"<@{team.bot_user_id}> {text}"
    ts = slack.add_user_message(channel, full, user, team_id=team.team_id)
    return app_mention_event(text=full, user=user, channel=channel, ts=ts, team_id=team.team_id)


def replies(slack: SlackEmulator, team: Team, channel: str, thread_ts: str) -> list[Any]:
    return [m for m in slack.thread(channel, thread_ts) if m.bot_id == team.bot_id]


def assert_every_call_with_its_own_teams_token(teams: Workspaces) -> None:
    """Each Web API call the bot made went with the token of the team it acted in; none was refused for its token
    or for a channel of another team."""
    calls = [c for c in teams.slack.calls if c.token in teams.tokens.values()]
    assert calls, "the bot made no call with an install's token"
    for call in calls:
        assert call.team_id == teams.team_of(call.token), call
        assert call.error not in ("invalid_auth", "channel_not_found", "not_authed"), call
    assert not [c for c in teams.slack.calls if c.token and c.token not in teams.tokens.values()], \
        "a call with a token no install holds"


async def test_each_workspace_is_answered_with_its_own_token(
    bot: TeamsBot, teams: Workspaces, openai_emulator: OpenAIEmulator,
) -> None:
    slack = teams.slack
    openai_emulator.script(Text("Team A's answer."), Text("Team B's answer."))
    in_a = ask(slack, teams.a, CHANNEL_A, ALICE, "a question of team A")
    await slack.deliver_event(bot.url, in_a, team_id=teams.a.team_id)
    assert await eventually(lambda: [m.text for m in replies(slack, teams.a, CHANNEL_A, in_a["ts"])] == ["Team A's answer."])
    in_b = ask(slack, teams.b, CHANNEL_B, BRUNO, "a question of team B")
    await slack.deliver_event(bot.url, in_b, team_id=TEAM_B)
    assert await eventually(lambda: [m.text for m in replies(slack, teams.b, CHANNEL_B, in_b["ts"])] == ["Team B's answer."])
    assert_every_call_with_its_own_teams_token(teams)
    posts = {(c.team_id, c.params.get("channel")) for c in slack.calls if c.method == "chat.postMessage"}
    assert posts == {(teams.a.team_id, CHANNEL_A), (TEAM_B, CHANNEL_B)}


async def test_a_click_in_team_b_cannot_decide_team_as_approval(
    db: Database, teams: Workspaces, openai_emulator: OpenAIEmulator, registry: ToolRegistry,
) -> None:
    slack = teams.slack
    # BRUNO may approve anything (APPROVERS): only his team keeps him from deciding A's approval.
    bot = await start_teams_bot(db, slack, openai_emulator.base_url, registry=registry, approvers=BRUNO)
    try:
        await _a_click_in_b_cannot_decide(bot, teams, openai_emulator)
    finally:
        await bot.stop()


async def _a_click_in_b_cannot_decide(bot: TeamsBot, teams: Workspaces, openai_emulator: OpenAIEmulator) -> None:
    slack = teams.slack
    openai_emulator.script(ToolCalls([Call("deploy", json.dumps({"env": "prod"}), id="call_prod")], text="Deploying."),
                           Text("Deployed."))
    question = ask(slack, teams.a, CHANNEL_A, ALICE, "deploy please")
    await slack.deliver_event(bot.url, question, team_id=teams.a.team_id)

    def approval() -> Any:
        return next((m for m in replies(slack, teams.a, CHANNEL_A, question["ts"])
                     if any(el.get("action_id") == "relaybot_approve" for b in m.blocks or () if b.get("type") == "actions"
                            for el in b.get("elements", ()))), None)

    assert await eventually(lambda: approval() is not None)
    shown = approval()
    button = next(el for b in shown.blocks if b["type"] == "actions" for el in b["elements"]
                  if el["action_id"] == "relaybot_approve")
    # Team B's person clicks A's button (a payload of team B naming A's message: a forged or replayed click).
    forged = slack.block_actions(CHANNEL_A, shown.ts, user=BRUNO, action_id="relaybot_approve", value=button["value"],
                                 team_id=TEAM_B)
    assert (await slack.deliver_interaction(bot.url, forged)).status == 200
    assert await eventually(lambda: any(c.team_id == TEAM_B and c.method == "chat.postEphemeral" for c in slack.calls))
    assert slack.message(CHANNEL_A, shown.ts).blocks == shown.blocks, "the approval is unchanged"
    assert "Deployed." not in [m.text for m in replies(slack, teams.a, CHANNEL_A, question["ts"])]
    # A's own approver still decides it, with A's token.
    mine = slack.block_actions(CHANNEL_A, shown.ts, user=ALICE, action_id="relaybot_approve", value=button["value"])
    await slack.deliver_interaction(bot.url, mine)
    assert await eventually(lambda: "Deployed." in [m.text for m in replies(slack, teams.a, CHANNEL_A, question["ts"])])
    # The note to B's clicker went with B's token, and Slack found no such channel in B: nothing of A's shown to B.
    [note] = [c for c in slack.calls if c.method == "chat.postEphemeral" and c.team_id == TEAM_B]
    assert note.token == teams.tokens[TEAM_B] and note.error == "channel_not_found"
    assert {c.method for c in slack.calls if c.token == teams.tokens[TEAM_B]} == {"auth.test", "chat.postEphemeral"}


async def test_a_kept_final_is_delivered_after_a_restart_with_its_teams_token(
    db: Database, teams: Workspaces, openai_emulator: OpenAIEmulator,
) -> None:
    slack = teams.slack
    thread_a = slack.add_user_message(CHANNEL_A, "a question of team A", ALICE, team_id=teams.a.team_id)
    thread_b = slack.add_user_message(CHANNEL_B, "a question of team B", BRUNO, team_id=TEAM_B)
    # A process kept both finals and died before delivering them.
    dead = PendingFinals(db, owner="died-with-finals")
    for answer_id, team, channel, thread in (("answer-team-a", teams.a.team_id, CHANNEL_A, thread_a),
                                            ("answer-team-b", TEAM_B, CHANNEL_B, thread_b)):
        await dead.keep(PendingFinal(answer_id=answer_id, platform="slack", workspace=team, channel=channel,
                                     thread=thread, parts=(FinalPart(text=f"The final of {answer_id}."),)))
        await dead.release(answer_id)
    restarted = await start_teams_bot(db, slack, openai_emulator.base_url)
    try:
        assert await eventually(lambda: [m.text for m in replies(slack, teams.a, CHANNEL_A, thread_a)]
                                == ["The final of answer-team-a."])
        assert await eventually(lambda: [m.text for m in replies(slack, teams.b, CHANNEL_B, thread_b)]
                                == ["The final of answer-team-b."])
    finally:
        await restarted.stop()
    [post_a] = [c for c in slack.calls if c.method == "chat.postMessage" and c.params.get("channel") == CHANNEL_A]
    assert post_a.token == teams.tokens[teams.a.team_id] and post_a.error is None
    assert_every_call_with_its_own_teams_token(teams)


async def test_an_uninstalled_team_fails_permanently_with_a_log_line_and_the_other_is_untouched(
    db: Database, bot: TeamsBot, teams: Workspaces, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture,
) -> None:
    slack = teams.slack
    caplog.set_level(logging.INFO)
    uninstalled = slack.oauth.uninstall(teams.a.team_id)
    assert (await slack.deliver_envelope(bot.url, uninstalled)).status == 200
    assert await eventually(lambda: any("uninstalled from Slack team" in r.getMessage() for r in caplog.records))
    # A final of A kept after the uninstall (by a process that died) sends nothing and waits for A's token, as one of a
    # team not yet imported would (dropped after OUTBOX_MAX_AGE_S like any kept final); A's new question is not answered.
    thread_a = slack.add_user_message(CHANNEL_A, "an old question of team A", ALICE, team_id=teams.a.team_id)
    await PendingFinals(db, owner="died-with-a-final").keep(PendingFinal(
        answer_id="answer-after-uninstall", platform="slack", workspace=teams.a.team_id, channel=CHANNEL_A,
        thread=thread_a, parts=(FinalPart(text="Never shown."),)))
    await PendingFinals(db, owner="died-with-a-final").release("answer-after-uninstall")
    await bot.adapter.maintain()
    assert any(f"not installed in Slack team {teams.a.team_id}" in r.getMessage() or
               f"Slack team {teams.a.team_id} has no bot token" in r.getMessage() for r in caplog.records)
    async with db.connection() as conn:
        left = await (await conn.execute("SELECT count(*) FROM pending_finals WHERE answer_id = 'answer-after-uninstall'")).fetchone()
    assert left is not None and left[0] == 1, "the final of a team without a token waits, never dropped at once"
    calls_before = len(slack.calls)
    in_a = ask(slack, teams.a, CHANNEL_A, ALICE, "still there?")
    await slack.deliver_event(bot.url, in_a, team_id=teams.a.team_id)
    # B goes on as before.
    openai_emulator.script(Text("B is still answered."))
    in_b = ask(slack, teams.b, CHANNEL_B, BRUNO, "and us?")
    await slack.deliver_event(bot.url, in_b, team_id=TEAM_B)
    assert await eventually(lambda: [m.text for m in replies(slack, teams.b, CHANNEL_B, in_b["ts"])] == ["B is still answered."])
    assert replies(slack, teams.a, CHANNEL_A, in_a["ts"]) == [] and replies(slack, teams.a, CHANNEL_A, thread_a) == []
    assert [c for c in slack.calls[calls_before:] if c.team_id != TEAM_B] == [], "nothing was sent for team A"
    assert_every_call_with_its_own_teams_token(teams)


async def test_a_kept_final_of_a_team_not_installed_yet_waits_and_arrives_once_it_is(
    db: Database, bot: TeamsBot, teams: Workspaces,
) -> None:
    # A deployment moving to "Add to Slack" before `relaybot teams import`: its team's kept final is not dropped.
    slack = teams.slack
    later = slack.add_team("T0000LATER", name="Installed later")
    slack.add_channel("C0000LATER", name="later", team_id=later.team_id)
    slack.revoke_token(later.bot_token)
    thread = slack.add_user_message("C0000LATER", "a question from before", ALICE, team_id=later.team_id)
    kept = PendingFinals(db, owner="died-before-the-move")
    await kept.keep(PendingFinal(answer_id="answer-waits", platform="slack", workspace=later.team_id,
                                 channel="C0000LATER", thread=thread, parts=(FinalPart(text="Kept until installed."),)))
    await kept.release("answer-waits")
    calls_before = len(slack.calls)
    await bot.adapter.maintain()
    assert [c for c in slack.calls[calls_before:] if c.team_id == later.team_id] == [], "nothing sent without a token"
    token = await install(db, slack, later)
    await asyncio.sleep(2.1)  # the outbox's back-off after that failed pass (2 s)
    await bot.adapter.maintain()
    assert await eventually(lambda: [m.text for m in replies(slack, later, "C0000LATER", thread)] == ["Kept until installed."])
    assert {c.token for c in slack.calls[calls_before:] if c.team_id == later.team_id} == {token}


async def test_a_grid_workspace_is_answered_with_its_orgs_install_and_so_is_its_kept_final_after_a_restart(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator,
) -> None:
    slack = slack_emulator
    org = "E0000ORG01"
    grid = slack.add_team("T0000GRID1", name="Grid one", enterprise_id=org)
    slack.add_channel("C0000GRID1", name="grid", team_id=grid.team_id)
    slack.revoke_token(grid.bot_token)
    # One org-wide install answers for every workspace of the org (is_enterprise_install, no team).
    token = slack.oauth.issue(None, enterprise_id=org).access_token
    await installations(db).async_save(Installation(
        app_id=slack.app_id, enterprise_id=org, team_id=None, bot_token=token, bot_id=grid.bot_id,
        bot_user_id=grid.bot_user_id, bot_scopes="chat:write,app_mentions:read", user_id="UINSTALLER",
        is_enterprise_install=True,
    ))
    bot = await start_teams_bot(db, slack, openai_emulator.base_url)
    try:
        openai_emulator.script(Text("The org's answer."))
        question = ask(slack, grid, "C0000GRID1", ALICE, "a question in a Grid workspace")
        envelope = slack.event_envelope(question, team_id=grid.team_id)
        envelope["enterprise_id"] = org
        envelope["authorizations"][0].update(enterprise_id=org, team_id=None, is_enterprise_install=True)
        await slack.deliver_envelope(bot.url, envelope)
        assert await eventually(lambda: [m.text for m in replies(slack, grid, "C0000GRID1", question["ts"])]
                                == ["The org's answer."])
    finally:
        await bot.stop()
    # A final of the workspace kept by a process that died: its row names the workspace alone, no org.
    thread = slack.add_user_message("C0000GRID1", "another question", ALICE, team_id=grid.team_id)
    dead = PendingFinals(db, owner="died-in-the-org")
    await dead.keep(PendingFinal(answer_id="answer-grid", platform="slack", workspace=grid.team_id,
                                 channel="C0000GRID1", thread=thread, parts=(FinalPart(text="The org's final."),)))
    await dead.release("answer-grid")
    restarted = await start_teams_bot(db, slack, openai_emulator.base_url)
    try:
        assert await eventually(lambda: [m.text for m in replies(slack, grid, "C0000GRID1", thread)] == ["The org's final."])
    finally:
        await restarted.stop()
    mine = [c for c in slack.calls if c.token]
    assert mine and all(c.token == token and c.team_id == grid.team_id and c.error is None for c in mine), \
        [(c.method, c.token[:12], c.team_id, c.error) for c in mine if c.token != token or c.error]


async def test_slack_team_ids_naming_a_grid_org_lets_its_workspaces_ask_and_no_other_team(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator,
) -> None:
    # SLACK_TEAM_IDS may name the org (E…), as the install check does: its workspaces' events pass the gate and their
    # people the access rule; a workspace outside the org is still refused.
    slack = slack_emulator
    org = "E0000ORG02"
    grid = slack.add_team("T0000GRID2", name="Grid two", enterprise_id=org)
    slack.add_channel("C0000GRID2", name="grid", team_id=grid.team_id)
    token = slack.oauth.issue(None, enterprise_id=org).access_token
    await installations(db).async_save(Installation(
        app_id=slack.app_id, enterprise_id=org, team_id=None, bot_token=token, bot_id=grid.bot_id,
        bot_user_id=grid.bot_user_id, bot_scopes="chat:write,app_mentions:read", user_id="UINSTALLER",
        is_enterprise_install=True,
    ))
    outsider = slack.add_team("T0000OUTSD", name="Outside")
    slack.add_channel("C0000OUTSD", name="outside", team_id=outsider.team_id)
    bot = await start_teams_bot(db, slack, openai_emulator.base_url, slack_team_ids=org)
    try:
        openai_emulator.script(Text("Answered inside the org."))
        question = ask(slack, grid, "C0000GRID2", ALICE, "a question in a workspace of the allowed org")
        envelope = slack.event_envelope(question, team_id=grid.team_id)
        envelope["enterprise_id"] = org
        envelope["authorizations"][0].update(enterprise_id=org, team_id=None, is_enterprise_install=True)
        await slack.deliver_envelope(bot.url, envelope)
        assert await eventually(lambda: [m.text for m in replies(slack, grid, "C0000GRID2", question["ts"])]
                                == ["Answered inside the org."])
        refused = ask(slack, outsider, "C0000OUTSD", ALICE, "a question from outside")
        await slack.deliver_envelope(bot.url, slack.event_envelope(refused, team_id=outsider.team_id))
        await asyncio.sleep(0.5)
        assert replies(slack, outsider, "C0000OUTSD", refused["ts"]) == []
    finally:
        await bot.stop()


async def answer_with_votes(teams: Workspaces, bot: TeamsBot, openai_emulator: OpenAIEmulator, text: str) -> Any:
    """Bruno's question in team B, answered with `text`: the answer's message once it carries its 👍/👎."""
    slack = teams.slack
    openai_emulator.script(Text(text))
    question = ask(slack, teams.b, CHANNEL_B, BRUNO, "a question to vote on")
    await slack.deliver_event(bot.url, question, team_id=TEAM_B)

    def voted_on() -> Any:
        return next((m for m in replies(slack, teams.b, CHANNEL_B, question["ts"])
                     if any(b.get("type") == "context_actions" for b in m.blocks or ())), None)

    assert await eventually(lambda: voted_on() is not None)
    return voted_on()


async def test_feedback_and_its_notes_in_team_b_go_with_team_bs_token(
    db: Database, teams: Workspaces, openai_emulator: OpenAIEmulator,
) -> None:
    slack = teams.slack
    bot = await start_teams_bot(db, slack, openai_emulator.base_url, feedback_buttons=True)
    try:
        voted_on = await answer_with_votes(teams, bot, openai_emulator, "Team B's answer, to vote on.")
        await slack.deliver_interaction(bot.url, slack.feedback_click(CHANNEL_B, voted_on.ts, user=BRUNO, positive=True,
                                                                      team_id=TEAM_B))
        assert await eventually(lambda: any(e.user == BRUNO and e.channel == CHANNEL_B for e in slack.ephemerals))
        await slack.deliver_interaction(bot.url, slack.feedback_click(CHANNEL_B, voted_on.ts, user=BRUNO, positive=False,
                                                                      team_id=TEAM_B))
        assert await eventually(lambda: len(slack.opened_views) == 1)  # the 👎 modal, opened in team B
    finally:
        await bot.stop()
    assert_every_call_with_its_own_teams_token(teams)
    assert {c.method for c in slack.calls if c.token == teams.tokens[TEAM_B]} >= {"chat.postEphemeral", "views.open"}


async def test_a_vote_naming_team_bs_answer_from_team_a_is_not_kept(
    db: Database, teams: Workspaces, openai_emulator: OpenAIEmulator,
) -> None:
    # A click payload of team A carrying the vote button of team B's answer (a copied value): it is not kept.
    slack = teams.slack
    bot = await start_teams_bot(db, slack, openai_emulator.base_url, feedback_buttons=True)
    try:
        voted_on = await answer_with_votes(teams, bot, openai_emulator, "Team B's answer, not A's to vote on.")
        await slack.deliver_interaction(bot.url, slack.feedback_click(CHANNEL_B, voted_on.ts, user=ALICE, positive=True,
                                                                      team_id=teams.a.team_id))
        await slack.deliver_interaction(bot.url, slack.feedback_click(CHANNEL_B, voted_on.ts, user=BRUNO, positive=False,
                                                                      team_id=TEAM_B))
        assert await eventually(lambda: len(slack.opened_views) == 1)  # B's own 👎 went through
    finally:
        await bot.stop()
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT vote FROM feedback WHERE user_id = %s", (ALICE,))
        assert await cursor.fetchall() == []


async def test_a_file_on_team_bs_message_is_read_with_team_bs_token(
    bot: TeamsBot, teams: Workspaces, openai_emulator: OpenAIEmulator,
) -> None:
    """files.slack.com serves a file only to a token of the file's team (the emulator shows others its sign-in page)."""
    slack = teams.slack
    notes = slack.add_file("plan.md", b"# Plan\nTeam B ships on Friday.", "text/markdown", team_id=TEAM_B)
    openai_emulator.script(Text("Friday."))
    question = ask(slack, teams.b, CHANNEL_B, BRUNO, "when do we ship?")
    question["files"] = [notes]
    await slack.deliver_event(bot.url, question, team_id=TEAM_B)
    assert await eventually(lambda: [m.text for m in replies(slack, teams.b, CHANNEL_B, question["ts"])] == ["Friday."])
    assert "Team B ships on Friday." in json.dumps(openai_emulator.chat_requests[-1])


async def test_a_reminder_and_an_expired_approval_of_team_b_go_with_team_bs_token(
    db: Database, bot: TeamsBot, teams: Workspaces, openai_emulator: OpenAIEmulator,
) -> None:
    """What the process's jobs ask of Slack outside a run names the team of the stored row it came from."""
    slack = teams.slack
    openai_emulator.script(ToolCalls([Call("deploy", json.dumps({"env": "prod"}), id="call_b")], text="Deploying."))
    question = ask(slack, teams.b, CHANNEL_B, BRUNO, "deploy please")
    await slack.deliver_event(bot.url, question, team_id=TEAM_B)

    def approval() -> Any:
        return next((m for m in replies(slack, teams.b, CHANNEL_B, question["ts"])
                     if any(el.get("action_id") == "relaybot_approve" for b in m.blocks or () if b.get("type") == "actions"
                            for el in b.get("elements", ()))), None)

    assert await eventually(lambda: approval() is not None)
    shown = approval()
    async with db.connection() as conn:
        await conn.execute("UPDATE continuations SET expires_at = now() - interval '1 second'")
    assert await expire_approvals(bot.engine.approvals, {"slack": bot.adapter.notifier}) == 1
    assert "⌛" in json.dumps(slack.message(CHANNEL_B, shown.ts).blocks, ensure_ascii=False)

    async def still_claimed() -> None:
        return None

    await bot.adapter.notifier.deliver_reminder(
        conversation=ConversationKey(platform="slack", workspace=TEAM_B, channel=CHANNEL_B, thread=question["ts"]),
        user=BRUNO, text="Reminder: check the deploy.", key="reminder:teams-1", attempted_at=None,
        check_claim=still_claimed,
    )
    assert "Reminder: check the deploy." in [m.text for m in replies(slack, teams.b, CHANNEL_B, question["ts"])]
    assert_every_call_with_its_own_teams_token(teams)
    updates = [c for c in slack.calls if c.method == "chat.update" and c.params.get("ts") == shown.ts]
    assert updates and all(c.token == teams.tokens[TEAM_B] for c in updates)


async def test_an_answer_of_team_b_a_crash_left_streaming_is_repaired_with_team_bs_token(
    db: Database, bot: TeamsBot, teams: Workspaces,
) -> None:
    slack = teams.slack
    thread = slack.add_user_message(CHANNEL_B, "a question of team B", BRUNO, team_id=TEAM_B)
    transport = bot.adapter.surfaces.transport(ReplyTarget(team_id=TEAM_B, channel=CHANNEL_B, thread_ts=thread))
    shown = await transport.post("The answer so far", key="answer-b-cut:0")
    # The process streaming it died: its live record stays, its heartbeat stale.
    await died_before_the_reply(db, LiveMessage(platform="slack", workspace=TEAM_B, channel=CHANNEL_B, message_id=shown,
                                                thread=thread), answer_id="answer-b-cut")
    assert await bot.adapter.runner.repair_leftovers(SlackShownMessages(bot.adapter.surfaces)) == 1
    assert NOTE_MARK in slack.message(CHANNEL_B, shown).text
    assert_every_call_with_its_own_teams_token(teams)
    repaired = [c for c in slack.calls if c.method == "chat.update" and c.params.get("ts") == shown]
    assert repaired and all(c.token == teams.tokens[TEAM_B] for c in repaired)


async def test_ask_and_the_home_tab_in_team_b_go_with_team_bs_token(
    bot: TeamsBot, teams: Workspaces, openai_emulator: OpenAIEmulator,
) -> None:
    slack = teams.slack
    openai_emulator.script(Text("B's window is Tuesday."))
    command = slack.slash_command("/ask", "when is our deploy window?", user=BRUNO, channel=CHANNEL_B, team_id=TEAM_B)
    assert (await slack.deliver_command(bot.url, command)).status == 200
    assert await eventually(lambda: any(m.text == "B's window is Tuesday." for m in slack.messages(CHANNEL_B)))
    await slack.deliver_event(bot.url, app_home_opened_event(user=BRUNO, channel="D0000BRUNO"), team_id=TEAM_B)
    assert await eventually(lambda: any(v.user_id == BRUNO for v in slack.views))
    assert_every_call_with_its_own_teams_token(teams)
    published = [c for c in slack.calls if c.method == "views.publish"]
    assert published and all(c.token == teams.tokens[TEAM_B] for c in published)
