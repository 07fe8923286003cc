-- The HTTP API (issue 14): keys stored hashed, their daily counters, the event journal a
-- reconnecting stream replays from, and the pending approval of each API conversation.

CREATE TABLE api_keys (
    id                  bigserial PRIMARY KEY,
    name                text NOT NULL UNIQUE,
    -- sha256 of the secret: a leaked table gives nobody a working key.
    key_hash            bytea NOT NULL UNIQUE,
    prefix              text NOT NULL,
    sources             text[],          -- NULL: every source
    requests_per_day    integer,         -- NULL: no limit
    tokens_per_day      bigint,          -- NULL: no limit
    created_at          timestamptz NOT NULL DEFAULT now(),
    revoked_at          timestamptz
);

-- One row per key and UTC day; requests are taken with one conditional upsert, so the limit
-- holds across processes.
CREATE TABLE api_key_usage (
    key_id      bigint NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    day         date NOT NULL,
    requests    integer NOT NULL DEFAULT 0,
    tokens      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, day)
);

-- Events of SSE streams, written in batches, kept for a while so a client reconnecting with
-- Last-Event-ID gets the rest.
CREATE TABLE api_event_journal (
    stream_id   uuid NOT NULL,
    key_id      bigint NOT NULL,  -- only the key that started a stream may read it back
    seq         integer NOT NULL,
    event       text NOT NULL,
    data        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream_id, seq)
);
CREATE INDEX api_event_journal_created_idx ON api_event_journal (created_at);
