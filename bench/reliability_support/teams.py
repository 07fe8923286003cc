"""Scenario (k): two Slack workspaces installed (stored installs, no SLACK_BOT_TOKEN), two processes, one restarted."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from slack_sdk.oauth.installation_store import Installation

from adapters.slack.installations import Sealer, SlackInstallations
from core.store.db import Database
from core.store.installations import InstallStore
from tests.emulators.slack import SlackEmulator, Team, app_mention_event
from tests.emulators.slack.oauth import DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET

from .harness import REPAIR_STALL_S, Question, Stage
from .slack_side import USER, SlackQuestion, SlackSide
from .tally import leaks_traceback

K_QUESTIONS = 40  # alternately in each team
K_CHANNELS = 5  # per team
K_PACE_S = 0.25
K_RESTART_AFTER = 16  # questions asked before process A gets SIGTERM (and starts again)
K_REDELIVER_EVERY = 5
K_SETTLE_S = 150.0
TEAM_B = "T0000TEAMB"
SECRET_KEY = "the reliability suite's key for sealing bot tokens"
# Refusals a call gets for a token that is not its team's (or no install's).
WRONG_TEAM_ERRORS = ("invalid_auth", "channel_not_found", "not_authed", "token_revoked")


class TwoTeams(SlackSide):
    """The emulator's default workspace and team B, each with its own channels, asker and installed bot token."""

    def __init__(self, emulator: SlackEmulator, *, socket_mode: bool = True) -> None:
        super().__init__(emulator, socket_mode=socket_mode)
        self.teams: tuple[Team, Team] = (emulator.team(), emulator.add_team(TEAM_B, name="Team B"))
        self.tokens: dict[str, str] = {}  # the installs' bot tokens → their team

    def env(self) -> dict[str, str]:
        # Several workspaces: the app's client id and secret, the key sealing stored tokens, no SLACK_BOT_TOKEN.
        return {**super().env(), "SLACK_BOT_TOKEN": "", "SLACK_CLIENT_ID": DEFAULT_CLIENT_ID,
                "SLACK_CLIENT_SECRET": DEFAULT_CLIENT_SECRET, "SECRET_KEY": SECRET_KEY}

    async def install(self, database_url: str, scratch: Any) -> None:
        """Both workspaces installed as the OAuth flow stores them; the emulator's own per-team tokens revoked, so
        only the installs' tokens work."""
        db = Database(url=database_url, data_dir=scratch)
        await db.open()
        try:
            store = SlackInstallations(InstallStore(db), sealer=Sealer(SECRET_KEY), client_id=DEFAULT_CLIENT_ID)
            for team in self.teams:
                self.slack.revoke_token(team.bot_token)
                token = self.slack.oauth.issue(team.team_id).access_token
                self.tokens[token] = team.team_id
                await store.async_save(Installation(
                    app_id=self.slack.app_id, enterprise_id=None, team_id=team.team_id, team_name=team.name,
                    bot_token=token, bot_id=team.bot_id, bot_user_id=team.bot_user_id,
                    bot_scopes="chat:write,app_mentions:read", user_id="UINSTALLER", is_enterprise_install=False,
                ))
        finally:
            await db.close()

    def team_channel(self, team: Team, index: int) -> str:
        return f"C{index:06d}{team.team_id[-1]}R"

    async def ask_in(self, team: Team, marker: str, *, channel_index: int) -> SlackQuestion:
        channel = self.team_channel(team, channel_index)
        full = f"<@{team.bot_user_id}> What is the status of {marker}?"
        asker = f"{USER[:-1]}{team.team_id[-1]}"
        ts = self.slack.add_user_message(channel, full, asker, team_id=team.team_id)
        event = app_mention_event(text=full, user=asker, channel=channel, ts=ts, team_id=team.team_id)
        question = SlackQuestion(marker=marker, channel=channel, ts=ts,
                                 envelope=self.slack.event_envelope(event, team_id=team.team_id))
        await self.deliver(question.envelope)
        return question

    def replies(self, question: SlackQuestion) -> list[Any]:
        bots = {team.bot_id for team in self.teams}
        return [m for m in self.slack.thread(question.channel, question.ts) if m.bot_id in bots and m.ts != question.ts]

    def shown_texts(self) -> list[str]:
        bots = {team.bot_id for team in self.teams}
        shown = [text for channel in self.slack.channel_ids for m in self.slack.messages(channel) if m.bot_id in bots
                 for text in (m.text, json.dumps(m.blocks or [], ensure_ascii=False), *(e.text for e in m.edits))]
        return shown + [e.text for e in self.slack.ephemerals]

    def tracebacks(self) -> int:
        return sum(1 for text in self.shown_texts() if leaks_traceback(text))

    def calls_with_another_teams_token(self) -> list[str]:
        """Every Web API call that went with a token not its team's: an install's token acting in another team (or
        refused as Slack refuses one), or a token no install holds (the app token opens sockets only)."""
        wrong = []
        for call in self.slack.calls:
            if call.method == "apps.connections.open":
                continue
            team = self.tokens.get(call.token)
            if team is None or call.team_id != team or call.error in WRONG_TEAM_ERRORS:
                wrong.append(f"{call.method} in {call.team_id} with {team or 'no install'}'s token ({call.error or 'ok'})")
        return wrong


async def two_teams_two_processes(stage: Stage) -> None:
    """(k): 40 mentions alternating between two installed workspaces over two processes, plus redeliveries; A gets
    SIGTERM mid-answers and starts again. Every call must go with its own team's token."""
    assert stage.side is not None
    side = TwoTeams(stage.side.slack, socket_mode=stage.side.socket_mode)  # type: ignore[union-attr]
    stage.side, figures = side, stage.figures
    await side.install(stage.database_url, stage.log_dir)
    first, second = stage.process("A", of=2), stage.process("B", of=2)
    await stage.start(first)
    await stage.start(second)
    questions: list[Question] = []
    restart: asyncio.Task[None] | None = None

    async def rolling_restart() -> None:
        code = await first.terminate()
        if code != 0:
            figures.note(f"A exited {code} on SIGTERM")
        await stage.start(first)

    for index in range(K_QUESTIONS):
        marker = f"Qk{index:03d}"
        stage.script.plan(marker, chars=500, chunk_chars=25, chunk_delay_s=0.1)
        team = side.teams[index % 2]
        questions.append(await side.ask_in(team, marker, channel_index=(index // 2) % K_CHANNELS))
        if index % K_REDELIVER_EVERY == K_REDELIVER_EVERY - 1:
            await side.redeliver(questions[index - 2])  # type: ignore[arg-type]
        if index == K_RESTART_AFTER:
            restart = asyncio.create_task(rolling_restart())
        await asyncio.sleep(K_PACE_S)
    if restart is not None:
        await restart
    settled = await stage.settle(questions, limit_s=K_SETTLE_S, stall_s=REPAIR_STALL_S)
    stage.tally(questions)
    wrong = side.calls_with_another_teams_token()
    for call in wrong[:5]:
        figures.note(call)
    figures.check(f"0 calls with another team's token ({len(wrong)} of {len(side.slack.calls)})", not wrong)
    figures.check("both teams answered", all(any(side.replies(q) for q in questions[t::2]) for t in (0, 1)))
    figures.check("every question settled in time", settled)
    figures.check("A restarted", first.starts == 2)
