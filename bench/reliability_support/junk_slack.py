"""Scenario (f) on Slack: malformed and forged deliveries to /slack/events (HTTP mode), generated from a seed."""

from __future__ import annotations

import copy
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tests.emulators.slack import SlackEmulator, app_mention_event, block_actions_payload, channel_message_event, dm_message_event
from tests.emulators.slack.events import Delivery

from .slack_side import USER

OTHER_TEAM = "T0OTHER001"
OUTSIDER = "U0OUTSIDE1"
BIG_CHARS = 100_000
JsonDict = dict[str, Any]
Send = Callable[[], Awaitable[Delivery]]

# How many of each kind (920 in all; with the 20 big questions and their 60 replays, 1,000 deliveries).
KINDS = {
    "bad JSON": 100,
    "bad signature": 60,
    "stale timestamp": 40,
    "wrong types": 150,
    "missing fields": 120,
    "other teams": 100,
    "forged clicks": 150,
    "forged or reused event ids": 50,
    "unknown types": 70,
    "100 KB junk": 80,
}
BAD_BODIES = (
    b'{"type": "event_callback", "event": ', "\u0000\ufffd garbage".encode(), b"[]", b"null", b'"event_callback"', b"123",
    b"{}", b'{"type": null}', b'{"type": "event_callback"}', b'{"type": "event_callback", "event": []}',
)
WEIRD_VALUES: tuple[Any, ...] = (None, 123, -1.5, True, [], ["x"], {}, {"a": 1}, "", "x" * 300, "\u0000\ud7ff")


class SlackJunk:
    """Makes the junk deliveries for one process URL; each is a coroutine factory, built before sending."""

    def __init__(self, slack: SlackEmulator, url: str, *, seed: int = 6) -> None:
        self.slack = slack
        self.url = url
        self.random = random.Random(seed)
        self.channel = "C0000JUNK1"

    def all(self) -> list[tuple[str, Send]]:
        made: list[tuple[str, Send]] = []
        for kind, count in KINDS.items():
            build = getattr(self, "_" + kind.replace(" ", "_").replace("100_KB", "big"))
            made += [(kind, build(index)) for index in range(count)]
        self.random.shuffle(made)
        return made

    # --- pieces ---

    def _mention_envelope(self, text: str = "what is up?", **event_options: Any) -> JsonDict:
        full = f"<@{self.slack.bot_user_id}> {text}"
        ts = self.slack.add_user_message(self.channel, full, USER)
        event = app_mention_event(text=full, user=USER, channel=self.channel, ts=ts, team_id=self.slack.team_id,
                                  **event_options)
        return self.slack.event_envelope(event)

    def _envelope(self, envelope: JsonDict, **options: Any) -> Send:
        return lambda: self.slack.deliver_envelope(self.url, envelope, **options)

    def _raw(self, body: bytes, **options: Any) -> Send:
        return lambda: self.slack.deliver_raw(self.url, body, **options)

    def _click(self, payload: Any) -> Send:
        body = json.dumps(payload) if not isinstance(payload, bytes) else payload
        form = b"payload=" + (body.encode() if isinstance(body, str) else body)
        return self._raw(form, content_type="application/x-www-form-urlencoded")

    # --- kinds ---

    def _bad_JSON(self, index: int) -> Send:
        return self._raw(BAD_BODIES[index % len(BAD_BODIES)])

    def _bad_signature(self, index: int) -> Send:
        return self._envelope(self._mention_envelope(), sign=False)

    def _stale_timestamp(self, index: int) -> Send:
        return self._envelope(self._mention_envelope(), timestamp=int(time.time()) - 3600)

    def _wrong_types(self, index: int) -> Send:
        envelope = self._mention_envelope()
        where = self.random.choice(("event", "envelope", "event", "event"))
        if where == "envelope":
            envelope[self.random.choice(("team_id", "event_id", "event", "authorizations", "api_app_id"))] = (
                self.random.choice(WEIRD_VALUES))
        else:
            envelope["event"][self.random.choice(("type", "user", "text", "ts", "channel", "thread_ts", "team",
                                                  "files", "user_team", "event_ts"))] = self.random.choice(WEIRD_VALUES)
        return self._envelope(envelope)

    def _missing_fields(self, index: int) -> Send:
        envelope = self._mention_envelope()
        for _ in range(self.random.randint(1, 3)):
            event = envelope.get("event")
            target = event if isinstance(event, dict) and self.random.random() < 0.7 else envelope
            if target:
                target.pop(self.random.choice(sorted(target)), None)
        return self._envelope(envelope)

    def _other_teams(self, index: int) -> Send:
        variant = index % 4
        if variant == 0:  # a workspace the bot is not allowed in
            envelope = self._mention_envelope()
            envelope["team_id"] = OTHER_TEAM
            envelope["authorizations"][0]["team_id"] = OTHER_TEAM
            return self._envelope(envelope)
        if variant == 1:  # Slack Connect: a person of another organisation in a shared channel
            return self._envelope(self._mention_envelope(user_team=OTHER_TEAM, source_team=OTHER_TEAM))
        if variant == 2:  # a DM from another organisation's person
            ts = self.slack.add_user_message("D0000JUNK1", "hello", OUTSIDER)
            event = dm_message_event(text="hello", user=OUTSIDER, channel="D0000JUNK1", ts=ts, team_id=self.slack.team_id,
                                     user_team=OTHER_TEAM)
            return self._envelope(self.slack.event_envelope(event))
        payload = self._forged_click_payload()  # a click from another workspace
        payload["user"]["team_id"] = OTHER_TEAM
        payload["team"]["id"] = OTHER_TEAM if index % 8 == 3 else payload["team"]["id"]
        return self._click(payload)

    def _forged_click_payload(self, *, value: str | None = None, action_id: str = "relaybot_approve") -> JsonDict:
        message = {"type": "message", "ts": f"{time.time():.6f}", "text": "Approval needed", "user": self.slack.bot_user_id}
        return block_actions_payload(
            user=USER, action_id=action_id, value=value or f"{uuid.uuid4()}|call_{self.random.randint(0, 99)}",
            message=message, channel=self.channel, team_id=self.slack.team_id, api_app_id=self.slack.app_id,
            response_url=f"{self.slack.base_url}response-url/{self.slack.team_id}/{self.channel}/{message['ts']}/{USER}",
        )

    def _forged_clicks(self, index: int) -> Send:
        variant = index % 10
        values = (None, f"{uuid.uuid4()}|*0+5", "not-a-uuid|call_1", "", "|", f"{uuid.uuid4()}|" + "x" * 500,
                  f"{uuid.uuid4()}|*99999+99999")
        if variant < 7:
            action = ("relaybot_approve", "relaybot_reject", "relaybot_approve_all", "relaybot_reject_all")[index % 4]
            return self._click(self._forged_click_payload(value=values[variant] if values[variant] is not None else None,
                                                          action_id=action))
        if variant == 7:
            return self._click(self._forged_click_payload(action_id="relaybot_arguments"))
        if variant == 8:
            payload = self._forged_click_payload()
            for key in self.random.sample(("user", "channel", "actions", "message", "container", "response_url"), 2):
                payload.pop(key, None)
            return self._click(payload)
        return self._click(b"{not json" if index % 20 == 9 else b'["a", "list"]')

    def _forged_or_reused_event_ids(self, index: int) -> Send:
        envelope = self._mention_envelope()
        envelope["event_id"] = ("Ev0000000001", "", 42, None, "Ev" + "9" * 200)[index % 5]
        return self._envelope(envelope)

    def _unknown_types(self, index: int) -> Send:
        variant = index % 7
        if variant == 0:
            return lambda: self.slack.deliver_url_verification(self.url, challenge=f"junk-{index}")
        envelope = self._mention_envelope()
        if variant == 1:
            envelope["type"] = "app_rate_limited"
        elif variant == 2:
            envelope["type"] = "something_new"
        elif variant == 3:
            envelope["event"] = {"type": "reaction_added", "user": USER, "reaction": "thumbsup",
                                 "item": {"type": "message", "channel": self.channel, "ts": "1.000001"}}
        elif variant == 4:
            envelope["event"]["type"] = "message"
            envelope["event"]["subtype"] = "message_changed"
            envelope["event"]["message"] = copy.deepcopy(envelope["event"])
        elif variant == 5:
            envelope["event"]["type"] = "message"
            envelope["event"]["subtype"] = "bot_message"
            envelope["event"]["bot_id"] = "B0OTHERBOT"
        else:
            envelope["event"].pop("type", None)
        return self._envelope(envelope)

    def _big_junk(self, index: int) -> Send:
        filler = ("junk " * (BIG_CHARS // 5))[:BIG_CHARS]
        variant = index % 4
        if variant == 0:  # a big channel message that is not a question
            ts = self.slack.add_user_message(self.channel, filler, USER)
            event = channel_message_event(text=filler, user=USER, channel=self.channel, ts=ts, team_id=self.slack.team_id)
            return self._envelope(self.slack.event_envelope(event))
        if variant == 1:  # a big mention from another workspace
            envelope = self._mention_envelope(filler)
            envelope["team_id"] = OTHER_TEAM
            return self._envelope(envelope)
        if variant == 2:  # a big field nobody reads
            envelope = self._mention_envelope()
            envelope["event"]["blocks"] = [{"type": "rich_text", "elements": [{"type": "text", "text": filler}]}]
            envelope["event"]["user"] = {"id": filler}
            return self._envelope(envelope)
        return self._raw(b'{"type": "event_callback", "event": {"text": "' + filler.encode() + b'"')
