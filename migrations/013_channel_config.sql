-- Per-channel settings (issue 13): one row per place an admin configured — a channel
-- (`slack:T1:C1`, `discord:G1:C9`) or a whole workspace / guild (`slack:T1`, `discord:G1`) — holding
-- only the fields set there; the rest come from the next level up and, last, the settings.
CREATE TABLE channel_config (
    scope       text PRIMARY KEY,
    settings    jsonb NOT NULL DEFAULT '{}'::jsonb,
    version     bigint NOT NULL DEFAULT 1,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  text NOT NULL
);

-- Every change to a channel's settings or to who may read a source: who, what, before → after, when.
CREATE TABLE config_audit (
    id          bigserial PRIMARY KEY,
    scope       text NOT NULL,      -- a channel or workspace scope, or `source:NAME`
    field       text NOT NULL,
    before      jsonb,              -- NULL: was not set
    after       jsonb,              -- NULL: no longer set
    changed_by  text NOT NULL,      -- `cli:<user>`, or whoever an API names
    changed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX config_audit_scope_idx ON config_audit (scope, id);

-- A restricted source is searched only where it is granted: a channel (`slack:T1:C1`) or the DMs
-- of a workspace (`slack:T1:dms`, `discord:@dm:dms`). Open sources (the default) are searched everywhere.
ALTER TABLE sources ADD COLUMN restricted boolean NOT NULL DEFAULT false;

CREATE TABLE source_grants (
    source_id   bigint NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    audience    text NOT NULL,
    granted_by  text NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_id, audience)
);
CREATE INDEX source_grants_audience_idx ON source_grants (audience);

-- A search scoped to a few small sources reads their vectors exactly (core/retrieval/search.py); this
-- finds them, and counts them, without touching the rest.
CREATE INDEX chunk_embeddings_source_idx ON chunk_embeddings (source_id, model);
