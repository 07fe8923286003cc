"""The door for Discord calls outside an answer's stream: paced on a channel's budget, errors read by one rule, posts looked up before they are sent again, interaction responses on a lane of their own.

Nothing else in the adapter calls discord.py's REST methods (tests/test_architecture.py and the runtime
guard of tests/support/platform_door.py check it)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import discord

from adapters.streaming import Clock, Priority, RateBudget, RateLimited, TransientSendError
from adapters.streaming.send import send_paced

from .transport_http import OutcomeUnknown, guarded
from .transport_lookup import Matches, PostOnce

log = logging.getLogger(__name__)

# About the half minute discord.py's own re-sends used to give a login at start.
LOGIN_RETRY_S = (1.0, 2.0, 4.0, 8.0, 15.0)

T = TypeVar("T")
# Interaction responses have 3 s: a 429 longer than this is not waited out.
FAST_LANE_MAX_WAIT_S = 1.0
FAST_LANE_ATTEMPTS = 3
THREAD_ALREADY_CREATED = 160004
# discord.py reads a channel's history 100 messages a call.
HISTORY_PAGE = 100


async def post_message(
    channel: discord.abc.Messageable, *, budget: RateBudget, clock: Clock, nonce: str | None = None,
    matches: Matches | None = None, priority: Priority = Priority.FINAL, once: PostOnce | None = None,
    before_send: Callable[[], Awaitable[None]] | None = None, **fields: Any,
) -> discord.Message:
    """Posts a message on `budget`, retrying 429s and transient failures without ever posting it twice:
    the nonce covers Discord's few minutes, the look-up (by `matches`, else by its text) the rest. `once`,
    kept by a caller that sends the same message again later, carries an unseen attempt over to that call.
    `before_send` is awaited before each attempt, once the budget let it go (a reminder's claim check)."""
    once = once if once is not None else PostOnce(channel, matches=matches)
    extra = {"nonce": nonce} if nonce is not None else {}

    async def attempt() -> discord.Message:
        if before_send is not None:
            await before_send()
        return await once(lambda: channel.send(**fields, **extra), text=fields.get("content"))

    return await send_paced(attempt, budget=budget, clock=clock, priority=priority)


async def update_message(
    message: discord.Message | discord.PartialMessage, *, budget: RateBudget, clock: Clock,
    priority: Priority = Priority.FINAL, **fields: Any,
) -> discord.Message | None:
    """Edits a message on `budget` (an edit sets a state: sending it twice is harmless)."""
    return await send_paced(lambda: guarded(message.edit(**fields)), budget=budget, clock=clock, priority=priority)


async def read_message(message: discord.PartialMessage) -> discord.Message:
    return await guarded(message.fetch())


async def remove_message(message: discord.Message | discord.PartialMessage) -> None:
    """Deletes a message; one already gone counts as deleted."""
    try:
        await guarded(message.delete())
    except discord.NotFound:
        return


async def read_history(
    channel: discord.abc.Messageable, *, limit: int, before: discord.abc.Snowflake | None = None,
    around: discord.abc.Snowflake | None = None, budget: RateBudget | None = None,
) -> list[discord.Message]:
    """Up to `limit` messages, newest first (discord.py pages them and waits out short 429s). With `budget`
    (the bot-wide one), each page of 100 takes a call of it first, behind the answers."""
    if budget is not None:
        for _ in range(max(1, -(-limit // HISTORY_PAGE))):
            await budget.acquire(Priority.INTERMEDIATE)

    async def read() -> list[discord.Message]:
        return [message async for message in channel.history(limit=limit, before=before, around=around)]

    return await guarded(read())


async def show_typing(channel: discord.abc.Messageable) -> None:
    await guarded(channel.typing())


async def react(message: discord.Message, emoji: str) -> None:
    """The bot's reaction on a message (adding it twice is harmless)."""
    await guarded(message.add_reaction(emoji))


async def open_thread(message: discord.Message, *, name: str) -> discord.Thread:
    """Opens a thread on `message` once: a thread from a message has the message's id, so after a reply that
    never came (or a retry told it exists) the thread is read instead of opened again."""
    try:
        return await guarded(message.create_thread(name=name))
    except OutcomeUnknown:
        if message.guild is None:
            raise
        log.info("opening a thread on message %s had no answer; looking it up", message.id)
        return await _existing_thread(message)
    except discord.HTTPException as exc:
        if exc.code != THREAD_ALREADY_CREATED or message.guild is None:
            raise
        return await _existing_thread(message)


async def _existing_thread(message: discord.Message) -> discord.Thread:
    assert message.guild is not None
    channel = await guarded(message.guild.fetch_channel(message.id))
    if not isinstance(channel, discord.Thread):
        raise TransientSendError(f"no thread on message {message.id} yet")
    return channel


# ---- interactions: their own lane, never behind an answer's budget -------------------------------


async def _fast(make_call: Callable[[], Awaitable[T]]) -> T:
    """An interaction call within its 3 s: a short 429 or a refused-before-work failure is retried at once;
    anything whose outcome was not seen is not sent again (Discord takes one response per interaction)."""
    for attempt in range(1, FAST_LANE_ATTEMPTS + 1):
        try:
            return await guarded(make_call())
        except RateLimited as exc:
            if attempt == FAST_LANE_ATTEMPTS or exc.retry_after_s > FAST_LANE_MAX_WAIT_S:
                raise
            await asyncio.sleep(exc.retry_after_s)
        except OutcomeUnknown:
            raise
        except TransientSendError:
            if attempt == FAST_LANE_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


async def _respond_once(interaction: discord.Interaction, make_call: Callable[[], Awaitable[object]]) -> None:
    """The interaction's one response. One whose reply was lost most likely arrived (Discord refuses a
    second with "already acknowledged"), so the handler goes on as if it had: what comes next (edits,
    followups) says whether it did."""
    try:
        await _fast(make_call)
    except OutcomeUnknown as exc:
        log.warning("the response to interaction %s had no answer (%s); going on as if it arrived", interaction.id, exc)


async def respond(interaction: discord.Interaction, content: str, *, ephemeral: bool = True, **fields: Any) -> None:
    """The interaction's one response, a message (only the clicker sees it unless told)."""
    await _respond_once(interaction, lambda: interaction.response.send_message(content, ephemeral=ephemeral, **fields))


async def acknowledge(interaction: discord.Interaction, *, ephemeral: bool = False, thinking: bool = False) -> None:
    """The interaction's one response, "later": within 3 s, the real answer comes by edit or followup."""
    await _respond_once(interaction, lambda: interaction.response.defer(ephemeral=ephemeral, thinking=thinking))


async def show_modal(interaction: discord.Interaction, modal: discord.ui.Modal) -> None:
    await _respond_once(interaction, lambda: interaction.response.send_modal(modal))


async def update_original(interaction: discord.Interaction, **fields: Any) -> discord.InteractionMessage:
    """Edits the interaction's response (deferred or sent): a state, safe to send again."""
    for attempt in range(1, FAST_LANE_ATTEMPTS + 1):
        try:
            return await guarded(interaction.edit_original_response(**fields))
        except RateLimited as exc:
            if attempt == FAST_LANE_ATTEMPTS:
                raise
            await asyncio.sleep(exc.retry_after_s)
        except TransientSendError:
            if attempt == FAST_LANE_ATTEMPTS:
                raise
            await asyncio.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


async def update_original_paced(
    interaction: discord.Interaction, *, budget: RateBudget, clock: Clock, **fields: Any
) -> discord.InteractionMessage:
    """Edits the interaction's response on a channel's budget (a clicked message redrawn: Discord counts it
    with the channel's edits)."""
    return await send_paced(lambda: guarded(interaction.edit_original_response(**fields)), budget=budget, clock=clock)


async def tell(interaction: discord.Interaction, content: str, **fields: Any) -> None:
    """A note only the clicker sees, after the response, on the interaction's lane (its webhook has a limit
    of its own): sent once, never again after a reply that never came."""
    await _fast(lambda: interaction.followup.send(content, ephemeral=True, **fields))


async def followup(
    interaction: discord.Interaction, content: str, *, budget: RateBudget, clock: Clock,
    priority: Priority = Priority.INTERMEDIATE, **fields: Any,
) -> None:
    """A note after the response (a clicker's, behind the channel's answers unless told): never sent again
    after a failure whose outcome was not seen, since an ephemeral note cannot be looked up."""
    sent = False
    # A file is consumed by sending it: a callable `file` makes a fresh one per attempt.
    make_file = fields.pop("file", None)

    async def once() -> object:
        nonlocal sent
        if sent:
            return None
        extra = {} if make_file is None else {"file": make_file() if callable(make_file) else make_file}
        try:
            return await guarded(interaction.followup.send(content, **fields, **extra))
        except OutcomeUnknown:
            sent = True
            log.warning("a followup's reply was lost; not sending it again")
            return None

    await send_paced(once, budget=budget, clock=clock, priority=priority)


# ---- the bot itself ------------------------------------------------------------------------------


async def max_concurrency(http: discord.http.HTTPClient) -> int:
    """How many of the bot's shards may identify at once (GET /gateway/bot's session_start_limit); 1, as discord.py
    assumes, when Discord does not say."""
    try:
        _, _, limits = await http.get_bot_gateway()
        return int(limits["max_concurrency"])
    except (discord.DiscordException, aiohttp.ClientError, KeyError, TypeError, ValueError) as error:
        log.warning("Discord did not say how many shards may identify at once (%s): one each 5 s", type(error).__name__)
        return 1


async def is_member(client: discord.Client, guild_id: int, user_id: int) -> bool:
    """Asked of Discord's REST API (the bot has no members intent, so its cache does not know)."""
    try:
        await guarded(client.http.get_member(guild_id, user_id))
    except discord.NotFound:
        return False
    return True


async def sync_commands(tree: discord.app_commands.CommandTree[Any]) -> None:
    await guarded(tree.sync())


async def login(client: discord.Client, token: str, *, retry_s: tuple[float, ...] = LOGIN_RETRY_S) -> None:
    """Logs in; a 5xx or a lost connection is tried again with capped backoff (discord.py sends nothing twice
    itself), a refused token is not."""
    for delay_s in (*retry_s, None):
        try:
            await client.login(token)
            return
        except (discord.DiscordServerError, aiohttp.ClientError, asyncio.TimeoutError) as error:
            if delay_s is None:
                raise
            log.warning("Discord login failed (%s); trying again in %.0f s", type(error).__name__, delay_s)
            await asyncio.sleep(delay_s)
