-- Answer messages being streamed right now, so a restart after a crash can mark them interrupted.
CREATE TABLE live_messages (
    platform     text NOT NULL,
    workspace    text NOT NULL,
    channel      text NOT NULL,
    message_id   text NOT NULL,
    thread       text NOT NULL DEFAULT '',
    started_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (platform, channel, message_id)
);
