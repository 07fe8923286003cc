"""DiscordEmulator: serves Discord's REST API and gateway on 127.0.0.1 and drives them from tests."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import TypeVar

from aiohttp import web

from tests.emulators.discord import rest_channels, rest_directory, rest_interactions, rest_threads
from tests.emulators.discord.core import API_PREFIX
from tests.emulators.discord.faults import FaultKind
from tests.emulators.discord.learning_driver import LearningDriver
from tests.emulators.discord.gateway import snowflake_on_shard
from tests.emulators.discord.interaction_payloads import (
    OptionValue,
    find_button,
    find_command,
    interaction_payload,
    message_command_data,
    slash_data,
)
from tests.emulators.discord.models import (
    PUBLIC_THREAD_TYPE,
    TEXT_CHANNEL_TYPE,
    Channel,
    GlobalLimitConfig,
    Guild,
    Interaction,
    InteractionResponseRecord,
    JSONDict,
    RateLimitConfig,
    RequestRecord,
    Role,
    StoredMessage,
    UploadedFile,
    User,
)
from tests.emulators.discord.state import DEFAULT_EVERYONE_PERMISSIONS

DEFAULT_BOT_TOKEN = "emulator-bot-token"
INTERACTION_ACK_DEADLINE_S = 3.0
WAIT_FOR_INTERVAL_S = 0.01
COMPONENT_INTERACTION = 3
COMMAND_INTERACTION = 2
MESSAGE_COMMAND = 3
MODAL_SUBMIT_INTERACTION = 5
BUTTON_COMPONENT = 2

T = TypeVar("T")


class DiscordEmulator(LearningDriver):
    """A local Discord for discord.py. Use as `async with DiscordEmulator() as dc:`.

    `time_scale` multiplies every window (rate limits, token lifetime, heartbeat); the 3 s
    interaction deadline is not scaled, since it is what the bot must meet. `global_limit` is
    Discord's per-bot limit across routes (50 a second), besides the per-route buckets.
    """

    def __init__(
        self,
        *,
        time_scale: float = 1.0,
        rate_limit: RateLimitConfig | None = RateLimitConfig(),
        global_limit: GlobalLimitConfig | None = GlobalLimitConfig(),
        bot_token: str = DEFAULT_BOT_TOKEN,
        bot_name: str = "relaybot",
        interaction_ack_deadline_s: float = INTERACTION_ACK_DEADLINE_S,
    ) -> None:
        super().__init__(
            time_scale=time_scale,
            rate_limit=rate_limit,
            global_limit=global_limit,
            bot_token=bot_token,
            bot_name=bot_name,
            gateway_url=lambda: self.gateway_url,
        )
        self._ack_deadline_s = interaction_ack_deadline_s
        self._runner: web.AppRunner | None = None
        self._port = 0

    # ---- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(middlewares=[self.middleware])
        app.add_routes(rest_channels.build_routes(self, lambda: self.base_url, lambda: self.gateway_url))
        app.add_routes(rest_interactions.build_routes(self, lambda: self.base_url, ack_deadline_s=self._ack_deadline_s))
        app.add_routes(rest_directory.build_routes(self))
        app.add_routes(rest_threads.build_routes(self))
        app.add_routes([web.get("/gateway/", self.hub.handle, name="gateway")])
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        await self.hub.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> DiscordEmulator:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # ---- addresses and identity ---------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def api_base(self) -> str:
        """The value for `discord.http.Route.BASE`."""
        return f"{self.base_url}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self._port}/gateway/"

    @property
    def token(self) -> str:
        return self.world.bot_token

    @property
    def bot_user_id(self) -> int:
        return self.world.bot_user_id

    @property
    def application_id(self) -> int:
        return self.world.application_id

    @property
    def live_session_count(self) -> int:
        """Gateway sessions with an open socket (identified bots)."""
        return self.hub.live_session_count

    @property
    def live_shards(self) -> list[tuple[int, int]]:
        """[shard_id, shard_count] of each open gateway session, sorted ((0, 1) for an unsharded one)."""
        return self.hub.live_shards

    def set_rate_limit(self, config: RateLimitConfig | None) -> None:
        """Change (or with None, turn off) the per-channel create+edit budget."""
        self.rate_limit = config

    def fail_after_work(self, route: str, *, kind: FaultKind = "status", status: int = 500, times: int = 1) -> None:
        """The next `times` calls of `route` (message_create, thread_from_message, webhook_create …) are carried
        out, then answered with `status` ("status") or with the connection dropped before any answer ("drop")."""
        self.faults.arm(route, kind=kind, status=status, times=times)

    def fail_after_work_randomly(self, share: float, *, routes: Sequence[str], kind: FaultKind = "drop",
                                 seed: int = 0) -> None:
        """From now on a seeded random `share` of the successful calls of `routes` are carried out, then answered
        as fail_after_work's `kind` says (a dropped connection by default, or a 500); 0 turns it off."""
        self.faults.arm_randomly(share, routes=frozenset(routes), kind=kind, seed=seed)

    @property
    def after_work_faults(self) -> int:
        """How many calls were carried out and then answered with a fault (armed or random) so far."""
        return self.faults.fired

    def set_nonce_window(self, seconds: float) -> None:
        """How long a message nonce is remembered for enforce_nonce (Discord: a few minutes)."""
        self.nonce_window_s = seconds

    def set_interaction_token_lifetime(self, seconds: float | None) -> None:
        """How long an interaction's token works from its creation (Discord: 15 minutes; None: that times
        time_scale): past it, its webhook (followups, edits of its messages) answers 401 Invalid Webhook Token."""
        self.token_lifetime_s = seconds

    def hide_channel_from_bot(self, channel_id: int) -> None:
        """The bot may no longer view or read this channel (nor its threads): REST there answers 403 Missing
        Access, no events come from it, and interactions there say so in app_permissions."""
        self.world.bot_hidden_channels.add(channel_id)

    def set_global_limit(self, config: GlobalLimitConfig | None) -> None:
        """Change (or with None, turn off) the per-bot limit across routes."""
        self.global_limit = config

    # ---- world set-up (before the bot connects: GUILD_CREATE is sent at IDENTIFY) --------------

    def add_guild(
        self, name: str, *, owner_id: int | None = None, members: Sequence[int] | None = None,
        on_shard: tuple[int, int] | None = None, bot_added: bool = True,
    ) -> int:
        """A guild the bot is in; with `members`, only those users (and the bot) belong to it,
        otherwise every user does. `on_shard` ([shard_id, shard_count]) picks an id Discord routes to that shard.
        `bot_added=False`: the bot is not in it until add_bot_to_guild."""
        world = self.world
        guild_id = world.ids.next() if on_shard is None else snowflake_on_shard(world.ids.next(), on_shard)
        # The @everyone role shares the guild's id.
        world.roles[guild_id] = Role(
            id=guild_id, guild_id=guild_id, name="@everyone", permissions=DEFAULT_EVERYONE_PERMISSIONS, position=0
        )
        world.guilds[guild_id] = Guild(
            id=guild_id, name=name, owner_id=owner_id or world.bot_user_id, role_ids=[guild_id],
            member_ids=None if members is None else set(members),
        )
        if not bot_added:
            world.guilds_without_bot.add(guild_id)
        return guild_id

    def set_system_channel(self, guild_id: int, channel_id: int | None) -> None:
        """The guild's system channel (None: it has none), as its GUILD_CREATE tells the bot."""
        if channel_id is None:
            self.world.system_channels.pop(guild_id, None)
        else:
            self.world.system_channels[guild_id] = channel_id

    def mute_bot_in(self, channel_id: int) -> None:
        """The bot may view the channel but not post there (an overwrite denying it Send Messages): the
        channel's payload shows the overwrite, and a post answers 403 Missing Permissions."""
        self.world.bot_muted_channels.add(channel_id)

    async def add_bot_to_guild(self, guild_id: int) -> None:
        """Someone installs the bot in a guild while it is connected: GUILD_CREATE as a join, to its shard."""
        self.world.guilds_without_bot.discard(guild_id)
        self.world.bot_joined_at[guild_id] = time.time()
        await self.hub.guild_joined(guild_id)

    async def remove_bot_from_guild(self, guild_id: int) -> None:
        """The bot is kicked (or the guild deleted): GUILD_DELETE as a removal, to its shard."""
        self.world.guilds_without_bot.add(guild_id)
        await self.hub.guild_removed(guild_id)

    async def guild_outage(self, guild_id: int) -> None:
        """Discord loses a guild for a while (an outage): GUILD_DELETE with `unavailable: true`; the bot stays in it."""
        await self.hub.guild_removed(guild_id, outage=True)

    def add_member(self, guild_id: int, user_id: int) -> None:
        """Make a user a member of a guild whose members are listed (see add_guild)."""
        guild = self.world.guilds[guild_id]
        if guild.member_ids is not None:
            guild.member_ids.add(user_id)

    def remove_member(self, guild_id: int, user_id: int) -> None:
        """A user leaves a guild; from then on the guild lists its members."""
        guild = self.world.guilds[guild_id]
        if guild.member_ids is None:
            guild.member_ids = set(self.world.users)
        guild.member_ids.discard(user_id)

    def add_channel(self, guild_id: int, name: str, *, threads_allowed: bool = True) -> int:
        """A text channel; with threads_allowed=False the bot may not start threads in it (403)."""
        channel_id = self.world.ids.next()
        self.world.channels[channel_id] = Channel(
            id=channel_id, type=TEXT_CHANNEL_TYPE, name=name, guild_id=guild_id, threads_allowed=threads_allowed
        )
        self.world.guilds[guild_id].channel_ids.append(channel_id)
        return channel_id

    def add_role(self, guild_id: int, name: str, permissions: int = 0) -> int:
        guild = self.world.guilds[guild_id]
        role_id = self.world.ids.next()
        self.world.roles[role_id] = Role(
            id=role_id, guild_id=guild_id, name=name, permissions=permissions, position=len(guild.role_ids)
        )
        guild.role_ids.append(role_id)
        return role_id

    def add_user(self, name: str, *, bot: bool = False, roles: Sequence[int] = ()) -> int:
        user_id = self.world.ids.next()
        self.world.users[user_id] = User(id=user_id, name=name, bot=bot, role_ids=list(roles))
        return user_id

    def grant_role(self, user_id: int, role_id: int) -> None:
        """Give a user a role; later interactions carry it (the gateway is not told)."""
        self.world.users[user_id].role_ids.append(role_id)

    # ---- what users do ------------------------------------------------------------------------

    async def send_user_message(
        self,
        channel_id: int,
        author_id: int,
        content: str,
        *,
        mentions_bot: bool = False,
        attachments: Sequence[UploadedFile] | None = None,
        reply_to: int | None = None,
        guild_id: int | None = None,
    ) -> int:
        """Post a message as a user (in a guild channel, thread or DM) and dispatch MESSAGE_CREATE."""
        channel = self.world.channels[channel_id]
        if guild_id is not None and guild_id != channel.guild_id:
            raise ValueError(f"channel {channel_id} is not in guild {guild_id}")
        mention = f"<@{self.bot_user_id}>"
        if mentions_bot and mention not in content:
            content = f"{mention} {content}"
        body: JSONDict = {"content": content}
        if reply_to is not None:
            body["message_reference"] = {"message_id": str(reply_to), "channel_id": str(channel_id)}
        stored = [
            rest_channels.store_attachment(self, f.filename, f.data, f.content_type, self.base_url)
            for f in attachments or ()
        ]
        message = await self.store_message(channel_id=channel_id, author_id=author_id, body=body, attachments=stored)
        return message.id

    async def start_thread(self, message_id: int, name: str, *, by: int) -> int:
        """A user opens a public thread on a guild message (the bot is not in it); dispatches THREAD_CREATE.
        Returns the thread's id, which is the message's."""
        message = self.world.messages[message_id]
        if message.guild_id is None or message.id in self.world.channels:
            raise ValueError(f"message {message_id} cannot start a thread")
        await rest_channels.open_thread(self, message, name, owner_id=by)
        return message.id

    async def send_webhook_message(self, channel_id: int, name: str, content: str) -> int:
        """A message posted through an incoming webhook (author flagged bot, with webhook_id)."""
        webhook_id = self.world.ids.next()
        self.world.users[webhook_id] = User(id=webhook_id, name=name, bot=True, webhook=True)
        message = await self.store_message(
            channel_id=channel_id, author_id=webhook_id, body={"content": content}, webhook_id=webhook_id
        )
        return message.id

    async def send_dm(
        self, author_id: int, content: str, *, attachments: Sequence[UploadedFile] | None = None
    ) -> int:
        channel = rest_channels.ensure_dm_channel(self, author_id)
        return await self.send_user_message(channel.id, author_id, content, attachments=attachments)

    def dm_channel_id(self, user_id: int) -> int:
        return rest_channels.ensure_dm_channel(self, user_id).id

    async def click_button(
        self, message_id: int, custom_id: str, user_id: int, *, allow_disabled: bool = False
    ) -> int:
        """Click a button on a stored message; dispatches INTERACTION_CREATE type 3."""
        message = self.world.messages[message_id]
        button = find_button(message.components, custom_id)
        if button is None:
            raise ValueError(f"message {message_id} has no component with custom_id {custom_id!r}")
        if button.get("disabled") and not allow_disabled:
            raise ValueError(f"button {custom_id!r} on message {message_id} is disabled")
        interaction = self._new_interaction(
            COMPONENT_INTERACTION, user_id, message.channel_id, source_message_id=message_id
        )
        data = {"custom_id": custom_id, "component_type": int(button.get("type", BUTTON_COMPONENT))}
        await self._dispatch_interaction(interaction, data)
        return interaction.id

    async def submit_modal(self, interaction_id: int, values: Mapping[str, str] | None = None) -> int:
        """The user submits the modal interaction `interaction_id` answered with (a MODAL response): dispatches
        INTERACTION_CREATE type 5 with the values typed, by text input custom_id (others keep their initial value).
        Checked as Discord's client checks it: a required input filled, lengths within bounds."""
        opened = self.world.interactions[interaction_id]
        if opened.modal is None:
            raise ValueError(f"interaction {interaction_id} opened no modal")
        modal, given = opened.modal, dict(values or {})
        rows: list[JSONDict] = []
        for item in rest_interactions.text_inputs(modal):
            value = str(given.pop(item["custom_id"], item.get("value") or ""))
            if item.get("required", True) and not value:
                raise ValueError(f"{item['custom_id']!r} is required")
            if value and not int(item.get("min_length") or 0) <= len(value) <= int(item.get("max_length") or 4000):
                raise ValueError(f"{item['custom_id']!r} must be {item.get('min_length') or 0} to {item.get('max_length') or 4000} characters")
            rows.append({"type": 1, "components": [{"type": 4, "custom_id": item["custom_id"], "value": value}]})
        if given:
            raise ValueError(f"the modal has no inputs {sorted(given)}")
        opened.modal = None  # submitted once: the modal is closed
        interaction = self._new_interaction(
            MODAL_SUBMIT_INTERACTION, opened.user_id, opened.channel_id, source_message_id=opened.source_message_id
        )
        await self._dispatch_interaction(interaction, {"custom_id": modal["custom_id"], "components": rows})
        return interaction.id

    async def invoke_slash(
        self, name: str, options: Mapping[str, OptionValue] | None, user_id: int, channel_id: int
    ) -> int:
        """Invoke a synced slash command; dispatches INTERACTION_CREATE type 2. `name` may name a subcommand
        ("relaybot config set"), whose options are then nested under its group as Discord sends them."""
        channel = self.world.channels[channel_id]
        command_name, *path = name.split()
        command = find_command(self.world, command_name, channel.guild_id)
        if command is None:
            raise ValueError(f"no synced command named {command_name!r}")
        if channel.guild_id is None and (command.get("dm_permission") is False or command.get("contexts") == [0]):
            raise ValueError(f"{command_name!r} is not offered in DMs")
        data = slash_data(command, options or {}, path)
        interaction = self._new_interaction(COMMAND_INTERACTION, user_id, channel_id)
        await self._dispatch_interaction(interaction, data)
        return interaction.id

    async def invoke_message_command(self, name: str, target_message_id: int, user_id: int) -> int:
        """Run a synced message context-menu command (Apps → `name`) on a message; dispatches INTERACTION_CREATE
        type 2 whose data is command type 3 with `target_id` and the message under `resolved.messages`."""
        target = self.world.messages[target_message_id]
        channel = self.world.channels[target.channel_id]
        command = find_command(self.world, name, channel.guild_id, kind=MESSAGE_COMMAND)
        if command is None:
            raise ValueError(f"no synced message command named {name!r}")
        if channel.guild_id is None and (command.get("dm_permission") is False or command.get("contexts") == [0]):
            raise ValueError(f"{name!r} is not offered in DMs")
        interaction = self._new_interaction(COMMAND_INTERACTION, user_id, target.channel_id)
        await self._dispatch_interaction(interaction, message_command_data(self.world, command, target))
        return interaction.id

    def dismiss_ephemeral(self, message_id: int) -> None:
        """The user dismisses an ephemeral message ("Dismiss message"): it is gone, and editing it answers 404."""
        message = self.world.messages[message_id]
        if not message.ephemeral:
            raise ValueError(f"message {message_id} is not ephemeral")
        message.deleted = True

    async def click_custom_id(
        self, channel_id: int, custom_id: str, user_id: int, *, message_id: int | None = None,
        component_type: int = BUTTON_COMPONENT,
    ) -> int:
        """A component interaction naming any custom_id, unchecked (click_button checks that the message shows
        it, enabled): what a stale client or a forged request sends. INTERACTION_CREATE type 3, working token."""
        interaction = self._new_interaction(COMPONENT_INTERACTION, user_id, channel_id, source_message_id=message_id)
        await self._dispatch_interaction(interaction, {"custom_id": custom_id, "component_type": component_type})
        return interaction.id

    async def replay_interaction(self, interaction_id: int) -> None:
        """Dispatches an interaction already sent once again, same id and token (a replayed event)."""
        interaction = self.world.interactions[interaction_id]
        data = interaction.data if interaction.data is not None else {}
        await self.hub.dispatch("INTERACTION_CREATE", lambda _session: interaction_payload(self.world, interaction, data))

    async def dispatch_raw(self, event: str, payload: JSONDict) -> None:
        """Sends any payload as gateway event `event` to every session, as given (malformed on purpose if a
        test wants)."""
        await self.hub.dispatch(event, lambda _session: payload)

    def _new_interaction(
        self, kind: int, user_id: int, channel_id: int, *, source_message_id: int | None = None
    ) -> Interaction:
        channel = self.world.channels[channel_id]
        interaction = Interaction(
            id=self.world.ids.next(),
            token=self.world.new_token(),
            type=kind,
            user_id=user_id,
            channel_id=channel_id,
            guild_id=channel.guild_id,
            created_at=time.monotonic(),
            source_message_id=source_message_id,
        )
        self.world.interactions[interaction.id] = interaction
        self.world.interactions_by_token[interaction.token] = interaction
        return interaction

    async def _dispatch_interaction(self, interaction: Interaction, data: JSONDict) -> None:
        interaction.data = data
        payload = interaction_payload(self.world, interaction, data)
        await self.hub.dispatch("INTERACTION_CREATE", lambda _session: payload)

    async def drop_gateway_connections(self) -> None:
        """Cut every gateway socket abnormally; discord.py reconnects and RESUMEs."""
        await self.hub.drop_connections()

    # ---- what tests read ----------------------------------------------------------------------

    def messages(self, channel_id: int, *, include_ephemeral: bool = False) -> list[StoredMessage]:
        """Messages in a channel or thread, oldest first, each with its edit history."""
        found = sorted(self.world.channel_messages(channel_id), key=lambda m: m.id)
        return [m for m in found if include_ephemeral or not m.ephemeral]

    def messages_seen_by(self, channel_id: int, user_id: int) -> list[StoredMessage]:
        """What one user sees in a channel, oldest first: every message anyone sees, and the ephemeral ones of
        the interactions that user started (nobody else's)."""
        def sees(message: StoredMessage) -> bool:
            if not message.ephemeral:
                return True
            interaction = self.world.interactions.get(message.interaction_id or 0)
            return interaction is not None and interaction.user_id == user_id

        return [m for m in self.messages(channel_id, include_ephemeral=True) if sees(m)]

    def message(self, message_id: int) -> StoredMessage:
        return self.world.messages[message_id]

    def attachment_bytes(self, attachment: JSONDict) -> bytes:
        """The content of a stored message's attachment (as the bot uploaded it)."""
        key = str(attachment["url"]).split("/attachments/", 1)[1]
        return self.world.attachments[key][0]

    @property
    def threads(self) -> list[Channel]:
        return [c for c in self.world.channels.values() if c.type == PUBLIC_THREAD_TYPE]

    def thread_of(self, message_id: int) -> Channel | None:
        """The thread started on a message (Discord gives it the message's id)."""
        channel = self.world.channels.get(message_id)
        return channel if channel is not None and channel.type == PUBLIC_THREAD_TYPE else None

    def interaction_responses(self, interaction_id: int) -> list[InteractionResponseRecord]:
        return list(self.world.interactions[interaction_id].responses)

    def interaction(self, interaction_id: int) -> Interaction:
        return self.world.interactions[interaction_id]

    def commands(self, guild_id: int | None = None) -> list[JSONDict]:
        """Application commands as last bulk-overwritten (global, or for one guild)."""
        source = self.world.global_commands if guild_id is None else self.world.guild_commands.get(guild_id, [])
        return list(source)

    @property
    def request_log(self) -> list[RequestRecord]:
        return list(self.world.request_log)

    def requests_to(self, route: str) -> list[RequestRecord]:
        """Requests answered on one route, by its name (e.g. "member_get", "message_create")."""
        return [record for record in self.world.request_log if record.route == route]

    @property
    def typing_channel_ids(self) -> list[int]:
        return list(self.world.typing_channel_ids)

    async def wait_for(
        self, predicate: Callable[[], T | Awaitable[T]], timeout: float = 5.0, *, what: str = "condition"
    ) -> T:
        """Poll `predicate` until it returns something truthy, and return that; bounded by `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result  # type: ignore[return-value]
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what} not met within {timeout} s")
            await asyncio.sleep(WAIT_FOR_INTERVAL_S)
