-- Learning from channels (issue 24): a chosen Slack or Discord channel is one source of kind 'channel', its
-- messages kept here, and the documents they make (one per thread, one per stretch of channel messages) indexed
-- in the retrieval tables like any other source's (core/store/learned_channels.py, core/learning/).

ALTER TABLE sources DROP CONSTRAINT sources_kind_check;
ALTER TABLE sources ADD CONSTRAINT sources_kind_check CHECK (kind IN ('files', 'urls', 'mixed', 'channel'));

-- One row per chosen channel; its source is named `channel:<platform>:<workspace>:<channel>` (stable across
-- renames), owned by the team `<platform>:<workspace>`, restricted. Deleting the source deletes everything learnt.
-- checkpoint: where the backfill (or a catch-up) stands — its phase, the platform's cursor, the thread being read —
-- written in the same transaction as the page it follows, so a restart continues without duplicates.
CREATE TABLE learned_channels (
    source_id   bigint PRIMARY KEY REFERENCES sources (id) ON DELETE CASCADE,
    platform    text NOT NULL,
    workspace   text NOT NULL,
    channel     text NOT NULL,
    name        text NOT NULL DEFAULT '',            -- without '#'
    private     boolean NOT NULL,
    since_days  integer NOT NULL CHECK (since_days > 0),
    keep_days   integer CHECK (keep_days IS NULL OR keep_days > 0),   -- NULL: kept for ever
    state       text NOT NULL DEFAULT 'backfilling' CHECK (state IN ('backfilling', 'live', 'error')),
    error       text NOT NULL DEFAULT '',
    checkpoint  jsonb NOT NULL DEFAULT '{}'::jsonb,
    done        integer NOT NULL DEFAULT 0,
    total       integer,
    added_at    timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (platform, workspace, channel)
);

-- A channel's messages as read (history, replies, live events). document: the key of the document it is in,
-- `thread:<root id>` or `stretch:<YYYY-MM-DD>:<first message id>`. replies_read: a root whose replies were read.
-- by_bot: a bot's, an app's or this app's own message, kept so its thread's replies are found, never learned from.
CREATE TABLE channel_messages (
    source_id     bigint NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    id            text NOT NULL,
    thread        text NOT NULL DEFAULT '',
    author_id     text NOT NULL DEFAULT '',
    author_name   text NOT NULL DEFAULT '',
    text          text NOT NULL DEFAULT '',
    at            timestamptz NOT NULL,
    files         text[] NOT NULL DEFAULT '{}',
    permalink     text NOT NULL DEFAULT '',
    reply_count   integer NOT NULL DEFAULT 0,
    latest_reply  text NOT NULL DEFAULT '',
    replies_read  boolean NOT NULL DEFAULT false,
    by_bot        boolean NOT NULL DEFAULT false,
    document      text NOT NULL,
    PRIMARY KEY (source_id, id)
);
CREATE INDEX channel_messages_document_idx ON channel_messages (source_id, document);
CREATE INDEX channel_messages_at_idx ON channel_messages (source_id, at);
-- The backfill's next thread to read, found without reading the channel's other messages.
CREATE INDEX channel_messages_unread_roots_idx ON channel_messages (source_id, at)
    WHERE NOT replies_read AND (reply_count > 0 OR thread = id);

-- The channel document a retrieval document was built from (NULL for every other source's): its uri is the
-- permalink of its first message, which changes when that message is deleted, so it is found by this key.
ALTER TABLE documents ADD COLUMN channel_document text;
CREATE UNIQUE INDEX documents_channel_document_idx ON documents (source_id, channel_document)
    WHERE channel_document IS NOT NULL;
