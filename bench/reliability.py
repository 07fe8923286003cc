"""Reliability suite: real `relaybot run` processes against the Slack, Discord and OpenAI emulators and a Postgres
of its own, all on 127.0.0.1; prints one line per scenario and platform, then a total.

Run: .venv/bin/python -m bench.reliability [--only a,c] [--platforms slack] [--keep-logs]

Scenarios (each on Slack and on Discord):
  (a) two processes on one database, 50 mentions plus redeliveries, one process SIGTERMed mid-answers and started again
  (b) SIGKILL between the approval message and the click; the other process takes the click (create_reminder)
  (c) Postgres stopped (`pg_ctl stop -m fast`) for 10 s mid-answers, then started again
  (d) model faults: 500, 429 with Retry-After, stall, cut stream, malformed tool-call JSON
  (e) 100 mentions at once in 100 channels under a workspace-wide (Slack) or bot-wide (Discord) limit,
      plus 5 % of Slack calls answered 429 with Retry-After 1–3 s; Slack once told the cap, once not
  (f) 1,000 malformed or forged events and clicks, then an ordinary question
  (g) Postgres stopped for 30 s while 20 questions are asked (Slack redelivering on its own schedule), 5 after it
  (h) 10 % of posts and edits carried out by the platform, then their reply lost (the connection dropped)
  (i) Slack: SIGKILL of a process while its answers stream natively (SLACK_NATIVE_STREAMING=auto); the other repairs
      them while a quarter of reads and edits are answered 429
  (j) Slack: an incident, 60 s of 503/429 on every Web API method, one of two processes restarted during it, then
      recovery (kept finals delivered, 429s and time to settle after it)
  (k) Slack: two workspaces installed (stored installs, no SLACK_BOT_TOKEN), 40 mentions alternating between them
      over two processes plus redeliveries, one process SIGTERMed and started again; 0 calls with another team's token
Targets: 0 lost, 0 duplicated, exactly 1 run per approved call, 0 user-visible tracebacks (and each scenario's
checks); in (g)–(j) text shown twice anywhere in an answer counts as duplicated. Bounded: every wait has a limit;
the time budget is what the chosen scenarios may take at worst, with room for overruns, so every line runs.
Each run's process logs, the platform calls and the readings of unanswered questions stay in the log folder.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench.reliability_support import ambiguous, burst, faults, incident, junk, long_outage, native_kill, restarts, teams
from bench.reliability_support.harness import Stage
from bench.reliability_support.postgres import LoopbackPostgres
from bench.reliability_support.tally import Figures

# The time budget is the chosen scenarios' worst cases summed, times this (estimates run over on a loaded machine).
BUDGET_OVERRUN = 1.5
# Kept free at the end for shutting down and printing.
BUDGET_MARGIN_S = 15
PLATFORMS = ("slack", "discord")


@dataclass(frozen=True, kw_only=True)
class Scenario:
    key: str
    title: str
    run: Callable[[Stage], Awaitable[None]]
    # Seconds one platform's run may take at worst (its waits' limits): it is skipped when that no longer fits.
    worst_s: dict[str, float]
    stage_options: dict[str, Any] = field(default_factory=dict)


SCENARIOS = (
    Scenario(key="a", title="(a) 2 processes, SIGTERM + restart", run=restarts.two_processes_and_a_rolling_restart,
             worst_s={"slack": 150, "discord": 120}),
    Scenario(key="b", title="(b) SIGKILL before the click", run=restarts.approval_survives_a_crash,
             worst_s={"slack": 120, "discord": 120}),
    Scenario(key="c", title="(c) database down 10 s", run=faults.database_outage,
             worst_s={"slack": 90, "discord": 90}),
    Scenario(key="d", title="(d) model faults", run=faults.model_faults, worst_s={"slack": 80, "discord": 80}),
    Scenario(key="e", title="(e) burst of 100, cap told", run=burst.burst, worst_s={"slack": 170, "discord": 170},
             stage_options={"discord_channels": burst.E_QUESTIONS}),
    Scenario(key="f", title="(f) 1,000 junk events", run=junk.junk, worst_s={"slack": 180, "discord": 180},
             stage_options={"socket_mode": False}),
    # Only if time allows: the same burst with SLACK_WORKSPACE_POSTS_PER_MINUTE unset (the bot must learn it).
    Scenario(key="e2", title="(e) burst of 100, cap not told", run=partial(burst.burst, tell_the_cap=False),
             worst_s={"slack": 170}),
    Scenario(key="g", title="(g) database down 30 s, 20 asked", run=long_outage.database_down_30_s,
             worst_s={"slack": 280, "discord": 280}),
    Scenario(key="h", title="(h) 10 % of replies lost", run=ambiguous.lost_replies,
             worst_s={"slack": 220, "discord": 220}),
    Scenario(key="i", title="(i) SIGKILL mid native stream", run=native_kill.kill_while_streaming,
             worst_s={"slack": 260}),
    Scenario(key="j", title="(j) Slack incident 60 s 503/429", run=incident.slack_incident,
             worst_s={"slack": 560}),
    Scenario(key="k", title="(k) 2 teams, 2 processes, restart", run=teams.two_teams_two_processes,
             worst_s={"slack": 220}),
)
KEYS = sorted({scenario.key.rstrip("2") for scenario in SCENARIOS})

HEADER = (f"{'scenario':<38} {'platform':<8} {'questions':>9} {'answered once':>13} {'sentence':>8} {'lost':>5} "
          f"{'duplicated':>10} {'runs/approval':>13} {'tracebacks':>10}  {'result':<7} {'time':>6}")


def line(figures: Figures, title: str) -> str:
    if figures.not_run is not None:
        return f"{title:<38} {figures.platform:<8} not run: {figures.not_run}"
    result = "ok" if figures.passed else "FAIL"
    return (f"{title:<38} {figures.platform:<8} {figures.questions:>9} {figures.answered:>13} {figures.sentences:>8} "
            f"{figures.lost:>5} {figures.duplicated:>10} {figures.runs_per_approval:>13} {figures.tracebacks:>10}  "
            f"{result:<7} {figures.seconds:>5.0f}s")


def details(figures: Figures) -> list[str]:
    """Why a line failed (each target missed, each check failed), then what else the run noticed."""
    missed = []
    if figures.lost:
        missed.append(f"{figures.lost} lost")
    if figures.duplicated:
        missed.append(f"{figures.duplicated} duplicated")
    if figures.sentences and not figures.sentence_ok:
        missed.append(f"{figures.sentences} ended with a sentence instead of the answer")
    if figures.approvals and figures.runs_per_approval != "1":
        missed.append(f"tool runs per approved call: {figures.runs_per_approval}")
    if figures.tracebacks:
        missed.append(f"{figures.tracebacks} messages show a traceback")
    lines = [f"      ✗ {text}" for text in missed]
    lines += [f"      ✗ {name}" for name, passed in figures.checks if not passed]
    lines += [f"      · {note}" for note in figures.notes]
    if figures.log_tracebacks:
        lines.append(f"      · {figures.log_tracebacks} tracebacks in the processes' logs (not shown to users)")
    if figures.sentence_ok:
        lines.append("      · a clear sentence instead of the answer is an accepted ending here")
    return lines


def total(results: list[Figures]) -> str:
    ran = [f for f in results if f.not_run is None]
    approvals = sum(f.approvals for f in ran)
    runs = sum(f.tool_runs for f in ran)
    exact = all(f.runs_per_approval in ("-", "1") for f in ran)
    per_approval = "-" if not approvals else ("1" if exact else f"{runs / approvals:.2f}")
    passed = sum(1 for f in ran if f.passed)
    skipped = len(results) - len(ran)
    verdict = f"{passed}/{len(ran)} ok" + (f", {skipped} not run" if skipped else "")
    return (f"{'TOTAL':<38} {'':<8} {sum(f.questions for f in ran):>9} {sum(f.answered for f in ran):>13} "
            f"{sum(f.sentences for f in ran):>8} {sum(f.lost for f in ran):>5} {sum(f.duplicated for f in ran):>10} "
            f"{per_approval:>13} {sum(f.tracebacks for f in ran):>10}  {verdict}")


async def run_one(scenario: Scenario, platform: str, pg: LoopbackPostgres, log_root: Path, *, limit_s: float) -> Figures:
    """One scenario on one platform; past `limit_s` (what is left of the budget) it is stopped and says so."""
    stages: list[Stage] = []

    async def run() -> None:
        async with Stage(scenario=scenario.key, platform=platform, pg=pg, log_root=log_root,
                         **scenario.stage_options) as stage:
            stages.append(stage)
            await scenario.run(stage)

    try:
        await asyncio.wait_for(run(), limit_s)
        return stages[0].figures
    except Exception as error:  # a scenario that cannot run says so; it never counts as passed
        figures = stages[0].figures if stages else Figures(scenario=scenario.key, platform=platform)
        if isinstance(error, asyncio.TimeoutError):
            figures.not_run = f"stopped after {limit_s:.0f} s: the time budget ran out"
        else:
            figures.not_run = f"{type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}"
            logging.getLogger(__name__).exception("scenario %s on %s could not run", scenario.key, platform)
        return figures


def chosen(only: set[str] | None, platforms: tuple[str, ...]) -> list[tuple[Scenario, str]]:
    return [(scenario, platform) for scenario in SCENARIOS
            if only is None or scenario.key in only or scenario.key.rstrip("2") in only
            for platform in platforms if platform in scenario.worst_s]


def budget_s(runs: list[tuple[Scenario, str]]) -> float:
    return sum(scenario.worst_s[platform] for scenario, platform in runs) * BUDGET_OVERRUN + BUDGET_MARGIN_S


async def main(only: set[str] | None, platforms: tuple[str, ...], keep_logs: bool) -> int:
    started = time.monotonic()
    runs = chosen(only, platforms)
    budget = budget_s(runs)
    log_root = Path(tempfile.mkdtemp(prefix="relaybot-reliability-"))
    pg = LoopbackPostgres()
    await asyncio.to_thread(pg.init)
    await asyncio.to_thread(pg.start)
    print(f"relaybot reliability suite: Postgres on 127.0.0.1:{pg.port}, emulators on 127.0.0.1, "
          f"{os.cpu_count()} cores, budget {budget / 60:.0f} min; logs in {log_root}", flush=True)
    print(HEADER, flush=True)
    results: list[Figures] = []
    try:
        for scenario, platform in runs:
            left = budget - BUDGET_MARGIN_S - (time.monotonic() - started)
            if scenario.worst_s[platform] > left:
                figures = Figures(scenario=scenario.key, platform=platform,
                                  not_run=f"the time budget has {max(0, left):.0f} s left, "
                                          f"it may need {scenario.worst_s[platform]:.0f} s")
            else:
                figures = await run_one(scenario, platform, pg, log_root, limit_s=left)
            results.append(figures)
            print(line(figures, scenario.title), flush=True)
            for detail in details(figures):
                print(detail, flush=True)
    finally:
        await asyncio.to_thread(pg.close)
    print(total(results))
    print(f"runtime {time.monotonic() - started:.0f} s")
    if keep_logs:
        print(f"logs kept in {log_root}")
    else:
        shutil.rmtree(log_root, ignore_errors=True)
    return 0 if results and all(f.passed for f in results) else 1


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", help=f"comma-separated scenario letters of {','.join(KEYS)}, e.g. a,g "
                                       "(default: all; e also runs e2)")
    parser.add_argument("--platforms", default=",".join(PLATFORMS), help="slack, discord or both (default)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs and readings")
    args = parser.parse_args()
    # The pgserver package warns when XDG_RUNTIME_DIR is unset; the suite's output is its figures.
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # The emulators drop connections on purpose ((h)): aiohttp logs each as an error with its traceback.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    only = {part.strip() for part in args.only.split(",") if part.strip()} if args.only else None
    unknown = sorted((only or set()) - set(KEYS) - {scenario.key for scenario in SCENARIOS})
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)} (known: {', '.join(KEYS)})")
    platforms = tuple(part.strip() for part in args.platforms.split(",") if part.strip() in PLATFORMS)
    raise SystemExit(asyncio.run(main(only, platforms, args.keep_logs)))


if __name__ == "__main__":
    cli()
