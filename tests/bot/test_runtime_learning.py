"""The runtime's learning from channels: a process serving Slack lends the adapter the learning port, attaches its history
door and facts, and its scheduled job backfills a chosen channel; a process serving no such platform only purges."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest

from adapters.base import AdapterPorts, PlatformAdapter
from adapters.http.server import HttpServer
from adapters.platform import Platform
from adapters.slack import SLACK, SlackAdapter
from bot.cli import build_parser
from bot.runtime import Runtime
from bot.sources_cli import sources
from core.config import Settings
from core.engine import Engine
from core.learning.model import ChannelPlace, LearnedChannel
from core.learning.ports import LearnsChannels
from tests.e2e.slack_harness import channel_message, dm, model_request_text
from tests.emulators.discord import DiscordEmulator, point_discord_py_at
from tests.emulators.openai_server import OpenAIEmulator
from tests.emulators.slack import SlackEmulator
from tests.support.engine import test_settings as settings_for

T = TypeVar("T")
# A bound on each wait for the backfill, not a figure of its speed: what is checked is the state reached.
WAIT_S = 60.0



@pytest.fixture(autouse=True)
def no_learned_channels(database_url: str) -> None:
    """The module's tests share a database, and the emulators' team and channel ids: each starts with no channel chosen."""
    with psycopg.connect(database_url) as conn:
        if conn.execute("SELECT to_regclass('learned_channels')").fetchone() != (None,):
            conn.execute("DELETE FROM sources WHERE kind = 'channel'")


async def eventually(read: Callable[[], Awaitable[T]], done: Callable[[T], bool]) -> T:
    async with asyncio.timeout(WAIT_S):
        while not done(value := await read()):
            await asyncio.sleep(0.05)
    return value


def stored_texts(database_url: str, channel: str) -> list[str]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT m.text FROM channel_messages m JOIN learned_channels c USING (source_id) WHERE c.channel = %s"
            " ORDER BY m.id", (channel,)).fetchall()
    return [text for (text,) in rows]


async def prompt_for(slack: SlackEmulator, openai: OpenAIEmulator, url: str, user: str, question: str) -> str:
    """What the model was given for `user`'s question in their DM with the bot."""
    channel = f"D0{user}"
    slack.set_dm_user(channel, user)
    asked = len(openai.chat_requests)
    await slack.deliver_events(url, [dm(slack, channel, question, user=user)])

    async def requests() -> int:
        return len(openai.chat_requests)

    await eventually(requests, lambda count: count > asked)
    return model_request_text(openai.chat_requests[asked])


async def test_a_runtime_serving_slack_backfills_a_chosen_channel_through_the_adapters_door_and_takes_its_events(
    database_url: str, openai_emulator: OpenAIEmulator, slack_emulator: SlackEmulator, tmp_path: Path
) -> None:
    slack = slack_emulator
    slack.add_channel("C0INCID", name="incidents", members=["U0ANA", "U0BOB"])
    slack.add_user("U0CAROL", name="carol")  # in the workspace, not in #incidents
    root = slack.add_user_message("C0INCID", "the deploy failed at noon", "U0ANA")
    slack.add_user_message("C0INCID", "rolled back at 12:10", "U0BOB", root)
    settings = settings_for(
        openai_emulator.base_url, database_url=database_url, data_dir=tmp_path, http_port=0,
        slack_bot_token=slack.bot_token, slack_signing_secret=slack.signing_secret, slack_api_url=slack.api_url,
    )
    runtime = Runtime(settings)
    try:
        await runtime.start()
        assert runtime.learning is not None and runtime.learning.platforms == ["slack"]
        [adapter] = runtime.adapters
        assert isinstance(adapter, LearnsChannels)
        jobs = {job.id for job in runtime.scheduler.get_jobs()}
        assert {"learn-from-channels", "purge-learned-channels"} <= jobs
        service = runtime.learning.service
        place = ChannelPlace(platform="slack", workspace=slack.team_id, channel="C0INCID")
        # No door handed in: the service reads the channel through the one the Slack adapter was attached with.
        added = await service.add(place, since_days=30, keep_days=None)
        assert (added.name, added.private) == ("incidents", False)

        async def current() -> LearnedChannel | None:
            return await service.get(place)

        # The scheduled job (not this test) reads the history and the thread's replies.
        learned = await eventually(current, lambda c: c is not None and c.state == "live")
        assert learned is not None and learned.error == ""
        assert sorted(stored_texts(database_url, "C0INCID")) == ["rolled back at 12:10", "the deploy failed at noon"]

        # The retriever sees the channel through the rule the adapter's facts were attached to: in a DM, the
        # channels the asker can read.
        url = f"http://127.0.0.1:{runtime.http.port}/slack/events"
        assert "the deploy failed at noon" in await prompt_for(slack, openai_emulator, url, "U0ANA", "when did the deploy fail?")
        assert "the deploy failed at noon" not in await prompt_for(slack, openai_emulator, url, "U0CAROL",
                                                                   "when did the deploy fail?")

        # A delete as Slack delivers it reaches the learning port the adapter was lent.
        await slack.deliver_events(url, slack.delete_message("C0INCID", root))

        async def texts() -> list[str]:
            return stored_texts(database_url, "C0INCID")

        assert await eventually(texts, lambda found: "the deploy failed at noon" not in found) == ["rolled back at 12:10"]
    finally:
        await runtime.stop()


async def test_a_process_serving_no_platform_that_learns_purges_but_backfills_nothing(
    database_url: str, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    settings = settings_for(openai_emulator.base_url, database_url=database_url, data_dir=tmp_path, http_port=0)
    runtime = Runtime(settings)
    try:
        await runtime.start()
        jobs = {job.id for job in runtime.scheduler.get_jobs()}
        assert "purge-learned-channels" in jobs and "learn-from-channels" not in jobs
        assert runtime.learning is not None and runtime.learning.platforms == []
    finally:
        await runtime.stop()


def scaled_slack(time_scale: float) -> Platform:
    """Slack's table entry with the adapter's budgets on the emulator's clock (a minute lasts 3 s), as the e2e harness
    builds it."""
    def build(*, settings: Settings, engine: Engine, ports: AdapterPorts, http: HttpServer) -> PlatformAdapter:
        return SlackAdapter(settings=settings, engine=engine, ports=ports, http=http, time_scale=time_scale)

    return dataclasses.replace(SLACK, adapter=build)


async def test_a_stop_mid_backfill_leaves_the_channel_backfilling_and_the_next_start_goes_on_without_duplicates(
    database_url: str, openai_emulator: OpenAIEmulator, slack_emulator: SlackEmulator, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    slack = slack_emulator
    # Slack's limited tier: one history page a minute (3 s at the tests' time scale), 15 messages a page.
    slack.limit_history("limited")
    slack.add_channel("C0LONG", name="long", members=["U0ANA"])
    written = [f"note {n:02d}" for n in range(20)]  # two pages
    for text in written:
        slack.add_user_message("C0LONG", text, "U0ANA")
    settings = settings_for(
        openai_emulator.base_url, database_url=database_url, data_dir=tmp_path, http_port=0,
        slack_bot_token=slack.bot_token, slack_signing_secret=slack.signing_secret, slack_api_url=slack.api_url,
        slack_history_tier="limited",
    )
    place = ChannelPlace(platform="slack", workspace=slack.team_id, channel="C0LONG")
    first = Runtime(settings, platforms=(scaled_slack(slack.time_scale),))
    try:
        await first.start()
        assert first.learning is not None
        service = first.learning.service
        await service.add(place, since_days=30, keep_days=None)

        async def current() -> LearnedChannel | None:
            return await service.get(place)

        await eventually(current, lambda c: c is not None and c.done > 0)
    finally:
        await first.stop()  # while the next page waits its minute
    rows = stored_texts(database_url, "C0LONG")
    assert 0 < len(rows) < len(written)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT state, error FROM learned_channels WHERE channel = 'C0LONG'").fetchone() == (
            "backfilling", "")
    # What an admin sees meanwhile.
    assert await sources(settings, build_parser().parse_args(["sources"])) == 0
    [row] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("slack:")]
    assert row.split()[:2] == [f"slack:{slack.team_id}:C0LONG", "#long"] and "backfilling" in row, row

    second = Runtime(settings, platforms=(scaled_slack(slack.time_scale),))
    try:
        await second.start()
        assert second.learning is not None
        again = second.learning.service

        async def after() -> LearnedChannel | None:
            return await again.get(place)

        await eventually(after, lambda c: c is not None and c.state == "live")
        assert sorted(stored_texts(database_url, "C0LONG")) == written  # each once
    finally:
        await second.stop()


async def test_a_runtime_serving_discord_backfills_a_chosen_channel_through_the_adapters_door(
    database_url: str, openai_emulator: OpenAIEmulator, discord_emulator: DiscordEmulator, tmp_path: Path
) -> None:
    dc = discord_emulator
    guild = dc.add_guild("Team")
    ops = dc.add_channel(guild, "ops")
    ana = dc.add_user("ana")
    dc.post_at(ops, ana, "the failover ran at noon", at=time.time() - 3600)
    settings = settings_for(
        openai_emulator.base_url, database_url=database_url, data_dir=tmp_path, http_port=0,
        discord_token=dc.token, discord_api_base=dc.api_base, discord_gateway_url=dc.gateway_url,
        discord_message_content_intent=True,
    )
    runtime = Runtime(settings)
    with point_discord_py_at(dc):
        try:
            await runtime.start()
            assert runtime.learning is not None and runtime.learning.platforms == ["discord"]
            service = runtime.learning.service
            place = ChannelPlace(platform="discord", workspace=str(guild), channel=str(ops))
            assert (await service.add(place, since_days=30, keep_days=None)).name == "ops"

            async def current() -> LearnedChannel | None:
                return await service.get(place)

            await eventually(current, lambda c: c is not None and c.state == "live")
            assert stored_texts(database_url, str(ops)) == ["the failover ran at noon"]
        finally:
            await runtime.stop()


def chunk_texts(database_url: str, channel: str) -> str:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT k.text FROM chunks k JOIN learned_channels c USING (source_id) WHERE c.channel = %s", (channel,)
        ).fetchall()
    return "\n".join(text for (text,) in rows)


def incidents_runtime(slack: SlackEmulator, openai_url: str, database_url: str, tmp_path: Path) -> Runtime:
    """A Slack runtime (not started) whose workspace has #incidents with one message of Ana's."""
    slack.add_channel("C0INCID", name="incidents", members=["U0ANA"])
    slack.add_user_message("C0INCID", "the deploy failed at noon", "U0ANA")
    return Runtime(settings_for(
        openai_url, database_url=database_url, data_dir=tmp_path, http_port=0,
        slack_bot_token=slack.bot_token, slack_signing_secret=slack.signing_secret, slack_api_url=slack.api_url,
    ))


async def test_live_messages_taken_just_before_a_shutdown_are_searchable_after_it(
    database_url: str, openai_emulator: OpenAIEmulator, slack_emulator: SlackEmulator, tmp_path: Path
) -> None:
    slack = slack_emulator
    runtime = incidents_runtime(slack, openai_emulator.base_url, database_url, tmp_path)
    place = ChannelPlace(platform="slack", workspace=slack.team_id, channel="C0INCID")
    try:
        await runtime.start()
        assert runtime.learning is not None
        service = runtime.learning.service
        await service.add(place, since_days=30, keep_days=None)

        async def current() -> LearnedChannel | None:
            return await service.get(place)

        await eventually(current, lambda c: c is not None and c.state == "live")
        url = f"http://127.0.0.1:{runtime.http.port}/slack/events"
        # A burst: the second message's document waits out the rebuild interval after the first's build.
        await slack.deliver_events(url, [channel_message(slack, "C0INCID", "rolled back at 12:10", user="U0ANA"),
                                         channel_message(slack, "C0INCID", "postmortem on friday", user="U0ANA")])

        async def texts() -> list[str]:
            return stored_texts(database_url, "C0INCID")

        await eventually(texts, lambda found: "postmortem on friday" in found)
    finally:
        await runtime.stop()  # at once: the coalesced rebuild is still waiting
    assert "postmortem on friday" in chunk_texts(database_url, "C0INCID")


async def test_a_channel_added_from_the_cli_is_backfilled_by_the_running_bot_and_listed_live(
    database_url: str, openai_emulator: OpenAIEmulator, slack_emulator: SlackEmulator, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    slack = slack_emulator
    runtime = incidents_runtime(slack, openai_emulator.base_url, database_url, tmp_path)
    try:
        await runtime.start()
        # Another process: the admin's command, with the bot's settings.
        added = ["sources", "add-channel", f"slack:{slack.team_id}:#incidents", "--since", "30d"]
        assert await sources(runtime.settings, build_parser().parse_args(added)) == 0
        capsys.readouterr()

        async def listed() -> str:
            assert await sources(runtime.settings, build_parser().parse_args(["sources"])) == 0
            return capsys.readouterr().out

        out = await eventually(listed, lambda text: f"slack:{slack.team_id}:C0INCID" in text and text.rstrip().endswith("live"))
        assert "#incidents" in out
        assert stored_texts(database_url, "C0INCID") == ["the deploy failed at noon"]
    finally:
        await runtime.stop()


async def test_a_channel_the_bot_can_no_longer_read_is_listed_in_error_with_what_to_do(
    database_url: str, openai_emulator: OpenAIEmulator, slack_emulator: SlackEmulator, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    slack = slack_emulator
    runtime = incidents_runtime(slack, openai_emulator.base_url, database_url, tmp_path)
    place = ChannelPlace(platform="slack", workspace=slack.team_id, channel="C0INCID")
    try:
        await runtime.start()
        assert runtime.learning is not None
        service = runtime.learning.service
        await service.add(place, since_days=30, keep_days=None)
        slack.remove_bot_from("C0INCID")  # before its history is read: Slack answers not_in_channel

        async def current() -> LearnedChannel | None:
            return await service.get(place)

        failed = await eventually(current, lambda c: c is not None and c.state == "error")
        assert failed is not None and "/invite" in failed.error
        assert await sources(runtime.settings, build_parser().parse_args(["sources"])) == 0
        [row] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("slack:")]
        assert f"error: {failed.error}" in row
    finally:
        await runtime.stop()
