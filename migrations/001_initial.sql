-- Initial schema: conversations and their messages, paused runs, seen platform event ids.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE conversations (
    id          bigserial PRIMARY KEY,
    platform    text NOT NULL,
    workspace   text NOT NULL,
    channel     text NOT NULL,
    thread      text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (platform, workspace, channel, thread)
);

-- One row per chat message; the rows of one exchange (user question, assistant tool calls,
-- tool results, final answer) share a turn_id, so history is fitted a whole turn at a time.
CREATE TABLE messages (
    id               bigserial PRIMARY KEY,
    conversation_id  bigint NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    turn_id          uuid NOT NULL,
    role             text NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
    content          text NOT NULL DEFAULT '',
    tool_calls       jsonb,
    tool_call_id     text,
    sources          jsonb,
    author           text,
    token_count      integer,
    token_encoding   text,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_conversation_idx ON messages (conversation_id, id);

-- A run paused on tool calls that need approval; `state` is the versioned, serialisable run state.
CREATE TABLE continuations (
    id               uuid PRIMARY KEY,
    conversation_id  bigint REFERENCES conversations (id) ON DELETE CASCADE,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'resuming', 'done', 'expired', 'failed')),
    schema_version   integer NOT NULL,
    state            jsonb NOT NULL,
    call_ids         text[] NOT NULL,
    decisions        jsonb NOT NULL DEFAULT '{}'::jsonb,
    started_calls    text[] NOT NULL DEFAULT '{}',
    requested_by     text NOT NULL,
    message_refs     jsonb NOT NULL DEFAULT '[]'::jsonb,
    claimed_by       text,
    claimed_at       timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    finished_at      timestamptz
);
CREATE INDEX continuations_open_idx ON continuations (status, expires_at);
CREATE INDEX continuations_conversation_idx ON continuations (conversation_id) WHERE status = 'pending';

-- Platform event ids already taken, so a redelivery or a second instance never answers twice.
CREATE TABLE processed_events (
    platform     text NOT NULL,
    event_id     text NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (platform, event_id)
);
CREATE INDEX processed_events_received_idx ON processed_events (received_at);
